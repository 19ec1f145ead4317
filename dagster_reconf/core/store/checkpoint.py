"""Facts about a stream's checkpoint, and a restorable snapshot of it for migrations.

A native state migration writes a new batch into the checkpoint (new offset and commit
entries, new state files for the new partitioning) and leaves the files of earlier
batches as they were, except small metadata files. So before migrating, a
:class:`CheckpointSnapshot` records every file (path, size, modification time) and
copies the small mutable ones; :meth:`CheckpointSnapshot.restore` deletes what the
migration added and puts the copies back, which returns the checkpoint exactly to the
batch it was paused at. On a local filesystem the immutable files are kept too, as hard
links (no data copied): a stream resumed after the migration may delete old state files
(its state store's maintenance), and a rollback after the resume still finds them. The
snapshot lives beside the stream until the reconfiguration ends, so a re-run after a
crash can still roll back.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.storage import Location, copy_file, is_local, location_of

__all__ = [
    "CheckpointFacts",
    "CheckpointSnapshot",
    "OperatorMetadata",
    "checkpoint_facts",
    "committed_batches",
    "copy_checkpoint_as_of",
    "copy_offset_entry",
    "copy_source_logs",
    "drop_planned_after",
    "drop_planned_batch",
    "renew_query_id",
    "replay_problem",
    "replayable_batches",
    "retained_batches",
    "free_bytes",
    "last_committed_batch",
    "operator_metadata",
    "partitions_at",
    "stateful_operators",
    "tree_bytes",
]

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
_IMMUTABLE_SUFFIXES = (".sst", ".zip", ".changelog", ".delta", ".snapshot", ".log")  # content never rewritten in place


@dataclass(frozen=True)
class CheckpointFacts:
    """What a checkpoint's logs say (see :func:`checkpoint_facts`)."""

    last_offset_batch: int | None
    last_committed_batch: int | None
    state_partitions: int | None
    provider: str | None
    end_offsets: dict[int, Any]  # batch id -> the source offsets that batch ended at
    stateful: bool = False  # the checkpoint holds state of a stateful operator (its state metadata says so)

    @property
    def committed(self) -> bool:
        return self.last_offset_batch == self.last_committed_batch

    @property
    def uses_rocksdb(self) -> bool:
        return bool(self.provider) and "RocksDB" in str(self.provider)

    def summary(self) -> dict[str, Any]:
        """The facts without the per-batch offsets (for status pages)."""
        facts = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "end_offsets"}
        return {**facts, "committed": self.committed}


def _batch_ids(directory: Location) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _offset_entry(path: Location) -> tuple[dict[str, Any], list[Any]]:
    """The metadata line and source offsets of one offset-log entry (``v1``, metadata, then one line per source)."""
    lines = path.read_text().splitlines()
    metadata = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    offsets = [json.loads(line) if line.strip() not in ("", "-") else None for line in lines[2:]]
    return metadata, offsets


def last_committed_batch(checkpoint: Location) -> int | None:
    """The checkpoint's last committed batch: one listing, for a caller that polls it."""
    commits = _batch_ids(checkpoint / "commits")
    return commits[-1] if commits else None


def checkpoint_facts(checkpoint: Location, *, with_offsets: bool = False) -> CheckpointFacts:
    """Last planned and committed batch, state partitions and state store provider of a checkpoint.

    Args:
        with_offsets: also read every batch's end offsets (for a replay: one small file per batch).
    """
    offsets = _batch_ids(checkpoint / "offsets")
    partitions = provider = None
    if offsets:
        metadata, _ = _offset_entry(checkpoint / "offsets" / str(offsets[-1]))
        conf = metadata.get("conf", {})
        partitions = int(conf["spark.sql.shuffle.partitions"]) if "spark.sql.shuffle.partitions" in conf else None
        provider = conf.get("spark.sql.streaming.stateStore.providerClass")
    ends = {b: _offset_entry(checkpoint / "offsets" / str(b))[1] for b in offsets} if with_offsets else {}
    stateful = bool(stateful_operators(checkpoint))
    return CheckpointFacts(
        offsets[-1] if offsets else None, last_committed_batch(checkpoint), partitions, provider, ends, stateful
    )


def copy_offset_entry(
    source: Location,
    target: Location,
    batch_id: int,
    shuffle_partitions: int | None = None,
    as_batch: int | None = None,
) -> None:
    """Plan batch ``batch_id`` of checkpoint ``source`` in checkpoint ``target`` (as batch ``as_batch``, default the
    same id): the same offsets, optionally another ``spark.sql.shuffle.partitions`` (a query started on ``target``
    then runs exactly that batch first)."""
    lines = (source / "offsets" / str(batch_id)).read_text().splitlines()
    if shuffle_partitions is not None and len(lines) > 1 and lines[1].strip():
        metadata = json.loads(lines[1])
        metadata.setdefault("conf", {})["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
        lines[1] = json.dumps(metadata, separators=(",", ":"))
    entry = target / "offsets" / str(batch_id if as_batch is None else as_batch)
    entry.parent.mkdir(parents=True, exist_ok=True)
    if not (target / "metadata").exists():  # Spark refuses offsets without the query's metadata: a query of its own
        renew_query_id(target)
    entry.write_text("\n".join(lines))


def drop_planned_batch(checkpoint: Location, batch_id: int) -> None:
    """Remove the offset-log entry of planned, uncommitted batch ``batch_id``: the next start plans it again.

    Only for a batch no sink has seen (:mod:`dagster_reconf.core.spark.batch_jobs`): its offsets are then free to
    change.

    Raises:
        StreamStateError: ``batch_id`` is not the checkpoint's last planned batch, or it is committed.
    """
    facts = checkpoint_facts(checkpoint)
    if facts.last_offset_batch != batch_id or facts.committed:
        raise StreamStateError(
            f"checkpoint {checkpoint}: batch {batch_id} is not a planned, uncommitted last batch "
            f"(planned up to {facts.last_offset_batch}, committed up to {facts.last_committed_batch})"
        )
    for name in (str(batch_id), f".{batch_id}.crc"):
        entry = checkpoint / "offsets" / name
        if entry.exists():
            entry.unlink()


def drop_planned_after(checkpoint: Location, batch_id: int) -> int:
    """Remove the offset-log entries after ``batch_id`` (planned by a replay that never committed them); how many.

    Only for a checkpoint no live query runs on (a replay's target): the next start plans from ``batch_id``.
    """
    offsets, removed = checkpoint / "offsets", 0
    for entry in list(offsets.iterdir()) if offsets.is_dir() else []:
        version = _leading_int(entry.name.lstrip("."))  # ".12.crc" is entry 12's checksum
        if version is not None and version > batch_id:
            entry.unlink()
            removed += 1
    return removed


def copy_checkpoint_as_of(source: Location, target: Location, batch_id: int) -> dict[str, int]:
    """Copy checkpoint ``source`` as of its committed batch ``batch_id`` into ``target``, while its query may still run.

    The files of committed versions never change, so the copy is consistent: the offset and
    commit logs up to ``batch_id``, the sources' logs, and every state file of versions up to
    ``batch_id + 1`` (a state version is its batch id plus one). Files of later batches, and
    temporary ones, are left out; a file Spark's maintenance deletes during the walk is one
    no committed version up to ``batch_id`` still needs beyond the retention, so it is skipped.
    Returns counts of copied and skipped files.
    """
    copied = skipped = 0
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        parts, name = relative.parts, path.name
        top = parts[0]
        version = _leading_int(name.lstrip("."))  # ".12.zip.crc" is version 12's checksum
        later = (top in ("offsets", "commits") and version is not None and version > batch_id) or (
            top == "state" and len(parts) == 4 and version is not None and version > batch_id + 1
        )  # not SSTs/*
        if later or name.endswith(".tmp") or top not in ("metadata", "offsets", "commits", "sources", "state"):
            skipped += 1
            continue
        try:
            if path.is_dir():
                continue
            destination = target / relative.as_posix()
            destination.parent.mkdir(parents=True, exist_ok=True)
            copy_file(path, destination)
            copied += 1
        except FileNotFoundError:
            skipped += 1
    return {"copied": copied, "skipped": skipped}


def _leading_int(name: str) -> int | None:
    digits = name[: len(name) - len(name.lstrip("0123456789"))]
    return int(digits) if digits else None


def renew_query_id(checkpoint: Location) -> str:
    """Give the query of ``checkpoint`` a new id (its ``metadata`` file): what ran on it before (a replay into a new
    generation) is then told apart from what runs on it next in traces, which key activities by query id."""
    query_id = str(uuid.uuid4())
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}))
    return query_id


def copy_source_logs(source: Location, target: Location) -> int:
    """Copy the sources' own logs (``sources/``: the file source's list of files per log offset) between checkpoints."""
    copied = 0
    logs = source / "sources"
    if not logs.is_dir():
        return 0
    for path in logs.rglob("*"):
        if path.is_file() and not path.name.endswith(".crc"):
            destination = target / "sources" / path.relative_to(logs).as_posix()
            destination.parent.mkdir(parents=True, exist_ok=True)
            copy_file(path, destination)
            copied += 1
    return copied


def partitions_at(checkpoint: Location, batch_id: int | None = None) -> int | None:
    """State partitions the checkpoint records for ``batch_id`` (default: its last planned batch)."""
    if batch_id is None:
        return checkpoint_facts(checkpoint).state_partitions
    entry = checkpoint / "offsets" / str(batch_id)
    if not entry.is_file():
        return None
    conf = _offset_entry(entry)[0].get("conf", {})
    return int(conf["spark.sql.shuffle.partitions"]) if "spark.sql.shuffle.partitions" in conf else None


def stateful_operators(checkpoint: Location) -> dict[str, str]:
    """Stateful operator id -> operator name, from the checkpoint's operator metadata files (no Spark needed)."""
    return {operator.operator_id: operator.name for operator in operator_metadata(checkpoint)}


@dataclass(frozen=True)
class OperatorMetadata:
    """One stateful operator as its newest metadata file says: id, Spark's name for it, and, for
    ``transformWithState``, its state variables (``{"stateName", "stateVariableType", "ttlEnabled"}`` each)."""

    operator_id: str
    name: str
    state_variables: list[dict[str, Any]] = field(default_factory=list)


def operator_metadata(checkpoint: Location) -> list[OperatorMetadata]:
    """Every stateful operator of ``checkpoint``, read from the newest v2 metadata file where Spark wrote one (it
    carries the state variables), else the v1 file; the id alone where neither reads."""
    operators = []
    state = checkpoint / "state"
    for directory in sorted(state.iterdir() if state.is_dir() else [], key=lambda p: p.name):
        if not directory.name.isdigit():
            continue
        versions = directory / "_metadata" / "v2"
        newest = max(
            (f for f in (versions.iterdir() if versions.is_dir() else []) if f.name.isdigit()),
            key=lambda f: int(f.name),
            default=None,
        )
        info: dict[str, Any] = {}
        for metadata in (newest, directory / "_metadata" / "metadata"):
            if metadata is None or not metadata.is_file():
                continue
            lines = metadata.read_text().splitlines()
            try:
                info = json.loads(lines[1]) if len(lines) > 1 else {}
                break
            except json.JSONDecodeError:
                continue  # a damaged file: the older form, or the id alone
        operator = info.get("operatorInfo") if isinstance(info.get("operatorInfo"), dict) else {}
        try:
            variables = json.loads(info.get("operatorPropertiesJson") or "{}").get("stateVariables") or []
        except (json.JSONDecodeError, AttributeError):
            variables = []
        name = str(operator.get("operatorName") or "operator")
        operators.append(OperatorMetadata(directory.name, name, [v for v in variables if isinstance(v, dict)]))
    return operators


def tree_bytes(root: Location) -> int:
    """Bytes of every file under ``root`` (0 if it does not exist)."""
    if not root.exists():
        return 0
    total = 0
    for path in root.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:  # removed by Spark's state maintenance while we walked
            continue
    return total


def free_bytes(path: Location) -> int | None:
    """Free bytes on the file system holding ``path`` (or its nearest existing parent); None where unknowable (remote
    stores)."""
    if not is_local(path):
        return None
    probe = Path(str(path.path)) if not isinstance(path, Path) else path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _signature(path: Location) -> list[int]:
    """Size and modification time of a file: what tells a rewritten file from the one recorded."""
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


class CheckpointSnapshot:
    """A restorable record of a checkpoint's files, kept in ``directory`` (see module docstring)."""

    MANIFEST = "manifest.json"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def exists(self) -> bool:
        return (self.directory / self.MANIFEST).is_file()

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.directory / self.MANIFEST).read_text())

    def take(self, checkpoint: Location, batch_id: int | None) -> dict[str, Any]:
        """Record ``checkpoint`` (paused at ``batch_id``) and copy its mutable files; returns the manifest."""
        files, directories, copied = {}, [], 0
        copies, local = self.directory / "files", is_local(checkpoint)
        if copies.exists():
            shutil.rmtree(copies)
        for path in sorted(checkpoint.rglob("*")):
            relative = path.relative_to(checkpoint).as_posix()
            if path.is_dir():
                directories.append(relative)
                continue
            try:
                signature = _signature(path)
                target = copies / relative
                if not path.name.endswith(_IMMUTABLE_SUFFIXES) and not path.name.endswith(
                    tuple(s + ".crc" for s in _IMMUTABLE_SUFFIXES)
                ):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    copy_file(path, target)
                    copied += 1
                elif local:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _link_or_copy(path, target)
            except FileNotFoundError:
                # The paused driver's state store maintenance deletes versions past retention while we walk: a file
                # gone between the listing and the copy is one Spark no longer needs, so it is not part of the snapshot.
                continue
            files[relative] = signature
        manifest = {
            "checkpoint": str(checkpoint),
            "batch_id": batch_id,
            "files": files,
            "directories": directories,
            "copied": copied,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        replace_text(self.directory / self.MANIFEST, json.dumps(manifest))  # the snapshot exists only once complete
        return manifest

    def changes(self) -> dict[str, list[str]]:
        """Files added, changed and removed since the snapshot."""
        manifest = self.manifest()
        checkpoint, recorded = location_of(manifest["checkpoint"]), manifest["files"]
        present = {p.relative_to(checkpoint).as_posix(): p for p in checkpoint.rglob("*") if p.is_file()}
        changed = [r for r, p in present.items() if r in recorded and _signature(p) != recorded[r]]
        return {
            "added": sorted(set(present) - set(recorded)),
            "changed": sorted(changed),
            "removed": sorted(set(recorded) - set(present)),
        }

    def restore(self) -> dict[str, int]:
        """Return the checkpoint to the snapshot: delete added files, put copies back.

        Raises:
            StreamStateError: a file the snapshot did not copy was changed or removed.
        """
        manifest = self.manifest()
        checkpoint = location_of(manifest["checkpoint"])
        delta = self.changes()
        copies = self.directory / "files"
        missing = [r for r in delta["changed"] + delta["removed"] if not (copies / r).is_file()]
        if missing:
            raise StreamStateError(
                f"cannot restore checkpoint {checkpoint}: immutable files changed or vanished since the snapshot "
                f"({missing[:5]}); restore it from a backup"
            )
        for relative in delta["added"]:
            (checkpoint / relative).unlink()
        restore = delta["changed"] + delta["removed"]
        if (
            not is_local(checkpoint) and copies.is_dir()
        ):  # remote modification times are too coarse to trust: put every copy back
            restore = sorted(
                set(restore) | {p.relative_to(copies).as_posix() for p in copies.rglob("*") if p.is_file()}
            )
        for relative in restore:
            (checkpoint / relative).parent.mkdir(parents=True, exist_ok=True)
            copy_file(copies / relative, checkpoint / relative)
        kept = set(manifest["directories"])
        for directory in sorted(
            (p for p in checkpoint.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            if directory.relative_to(checkpoint).as_posix() not in kept and not any(directory.iterdir()):
                directory.rmdir()
        return {"deleted": len(delta["added"]), "restored": len(restore)}

    def discard(self) -> None:
        """Forget the snapshot (the reconfiguration ended)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link (no data copied; the content outlives the checkpoint's own name for it), or a copy across
    filesystems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def committed_batches(checkpoint: Location) -> set[int]:
    """The batch ids with a commit in ``checkpoint``."""
    commits = checkpoint / "commits"
    return {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.is_dir() else set()


def replayable_batches(checkpoint: Location, upto: int) -> list[int]:
    """The committed batch ids up to ``upto`` whose offsets ``checkpoint`` still holds, in order: what a replay runs
    (a merged batch's start entry is planned, never committed)."""
    committed = committed_batches(checkpoint)
    return [b for b in retained_batches(checkpoint, upto) if b in committed]


def retained_batches(checkpoint: Location, upto: int) -> list[int]:
    """The batch ids up to ``upto`` whose offsets ``checkpoint`` still holds, in order."""
    offsets = checkpoint / "offsets"
    return (
        sorted(b for p in offsets.iterdir() if p.name.isdigit() and (b := int(p.name)) <= upto)
        if offsets.is_dir()
        else []
    )


def replay_problem(checkpoint: Location) -> str | None:
    """Why checkpoint ``checkpoint`` cannot be replayed (None: it can): its offset log must still hold every batch from
    batch 0, a batch a precopy merged with the start entry it ran from."""
    facts = checkpoint_facts(checkpoint)
    if facts.last_committed_batch is None:
        return None
    batches = retained_batches(checkpoint, facts.last_committed_batch)
    replayed = set(replayable_batches(checkpoint, facts.last_committed_batch))
    logged = set(batches)
    holes = sorted(b for b in replayed if b > 0 and b - 1 not in logged)  # a batch runs from the entry before it
    if holes:
        return (
            f"the offset log of {checkpoint} has no entry before batch {holes[0]} (where it started from): state "
            "cannot be rebuilt from it; use the native strategy"
        )
    if batches and batches[0] != 0:
        return (
            f"the offset log of {checkpoint} starts at batch {batches[0]}: Spark purged older entries "
            "(spark.sql.streaming.minBatchesToRetain), so state cannot be rebuilt from the start; use the native "
            "strategy, or raise minBatchesToRetain in spark_conf for streams that must stay replayable"
        )
    return None
