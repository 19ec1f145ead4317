"""A checkpoint's RocksDB state versions as files: whether one can be carried to a later version number, and doing so.

Spark's RocksDB provider keeps version ``v`` of a store as ``v.zip`` (the SST files it references live beside it,
shared), and a batch ``b`` loads version ``b``. A replay that runs several batches as one (its id the last one's)
therefore needs the state it starts from under that id: the zip is copied to the new number, nothing else moves.
That is only possible where every version is a plain ``v.zip``: with changelog checkpointing a version is a chain of
``.changelog`` files, and checkpoint format v2 names versions by unique ids kept in the commit log.
"""

from __future__ import annotations

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.store.storage import Location, copy_file

__all__ = ["carry_state_version", "drop_uncommitted_state", "state_versions_problem"]


def _store_dirs(checkpoint: Location) -> list[Location]:
    """Every store directory (``state/<op>/<partition>[/<store>]``): the ones holding version files."""
    state = checkpoint / "state"
    if not state.is_dir():
        return []
    found = set()
    for path in state.rglob("*"):
        name = path.name.lstrip(".")
        if name.endswith((".zip", ".changelog", ".zip.crc", ".changelog.crc")) and path.parent.name != "SSTs":
            found.add(path.parent)
    return sorted(found, key=str)


def _partition_of(checkpoint: Location, directory: Location) -> int:
    """The state partition of store directory ``state/<op>/<partition>[/<store>]``."""
    return int(str(directory)[len(str(checkpoint / "state")) :].strip("/").split("/")[1])


def state_versions_problem(checkpoint: Location) -> str | None:
    """Why the state versions of ``checkpoint`` cannot be carried to other numbers (None: they can)."""
    for directory in _store_dirs(checkpoint):
        for path in directory.iterdir():
            name = path.name
            if name.endswith(".changelog"):
                return (
                    f"its state store writes changelogs ({path}): a version is a chain of them, not one file; "
                    "set spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=false to merge batches"
                )
            if name.endswith(".zip") and not name[: -len(".zip")].isdigit():
                return (
                    f"its state versions are named by unique ids ({path}, checkpoint format v2), kept in the commit "
                    "log: a version cannot be renumbered"
                )
    return None


def carry_state_version(checkpoint: Location, version: int, as_version: int, partitions: int) -> int:
    """Make version ``as_version`` of every store of ``checkpoint``'s ``partitions`` state partitions the same state as
    its version ``version``; the stores carried. Directories of partitions past ``partitions`` are left: an earlier
    partitioning's, no batch reads them.

    Raises:
        StreamStateError: a store has no ``version.zip`` (the versions are not plain files, or that one is gone).
    """
    directories = [d for d in _store_dirs(checkpoint) if _partition_of(checkpoint, d) < partitions]
    missing = [d for d in directories if not (d / f"{version}.zip").exists()]
    if missing:
        raise StreamStateError(
            f"state version {version} of {checkpoint} is not a file in {len(missing)} store(s), e.g. {missing[0]}: "
            "it cannot be carried to a later batch"
        )
    for directory in directories:
        copy_file(directory / f"{version}.zip", directory / f"{as_version}.zip")
        checksum = directory / f".{version}.zip.crc"
        if checksum.exists():
            copy_file(checksum, directory / f".{as_version}.zip.crc")
    return len(directories)


def drop_uncommitted_state(checkpoint: Location, last_version: int) -> int:
    """Remove the version files past ``last_version`` (what a replay that failed before its commit wrote); the files
    removed. Their SST files stay: unreferenced, Spark's maintenance deletes them."""
    removed = 0
    for directory in _store_dirs(checkpoint):
        for path in list(directory.iterdir()):
            head = path.name.lstrip(".").split(".", 1)[0]
            if head.isdigit() and int(head) > last_version and path.name.endswith((".zip", ".zip.crc")):
                path.unlink()
                removed += 1
    return removed
