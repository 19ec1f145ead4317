"""Keep Spark's file sink log in step with a checkpoint that gained batches without running the sink.

Spark's offline state repartition writes a batch N+1 into the checkpoint that reads no
input and writes no output, so the file sink's own log (``<path>/_spark_metadata/``)
never gets entry N+1. The sink compacts that log every ten batches and needs every
entry since the last compaction: ten batches after a repartition the stream fails with
``BATCH_METADATA_NOT_FOUND``. Before a query starts, every
committed checkpoint batch after the sink log's last entry is such a batch (the sink
writes its entry before the checkpoint commits a batch), so it gets the entry Spark
writes for a batch with no output files: ``v1`` and nothing else; where that batch is one
the sink compacts at, its ``.compact`` entry holds every file logged before it, as Spark's.

The other way round, a checkpoint rolled back past such an entry (a migration undone after
its entry was written) would make the sink skip the batch that runs again under that id:
empty entries at the log's end, after the checkpoint's last committed batch, are removed (a
batch that wrote no files loses nothing by running its sink again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dagster_reconf.core.store.storage import Location, location_of

__all__ = [
    "COMPACT_INTERVAL_CONF",
    "DEFAULT_COMPACT_INTERVAL",
    "SinkLogAlignment",
    "align_file_sink_log",
    "file_sink_path",
]

COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"
DEFAULT_COMPACT_INTERVAL = 10  # Spark's default
_FILE_SINK = re.compile(r"^FileSink\[(?P<path>.+)\]$")
_EMPTY_ENTRY = "v1"
_COMPACT = ".compact"


@dataclass(frozen=True)
class SinkLogAlignment:
    """What :func:`align_file_sink_log` changed: batch ids given empty entries, and empty entries removed."""

    filled: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.filled or self.cleared)


def file_sink_path(sink_description: str | None) -> str | None:
    """The output path of Spark's file sink from its progress description (``FileSink[path]``), else None."""
    match = _FILE_SINK.match(sink_description or "")
    return match["path"] if match else None


def _ids(directory: Location, suffix: str = "") -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(
        int(p.name[: len(p.name) - len(suffix)])
        for p in directory.iterdir()
        if p.name.endswith(suffix) and p.name[: len(p.name) - len(suffix) or None].isdigit()
    )


def _entries(log: Location, batch: int, compacted: set[int]) -> list[str]:
    """The file lines of one sink-log entry (its ``v1`` header dropped)."""
    name = f"{batch}{_COMPACT}" if batch in compacted else str(batch)
    return [line for line in (log / name).read_text().splitlines()[1:] if line.strip()]


def _compact_interval(compacted: set[int], default: int) -> int:
    """The interval the log was compacted at: Spark compacts at batch ``interval - 1`` first."""
    return min(compacted) + 1 if compacted else default


def _fill(log: Location, batch: int, logged: set[int], compacted: set[int], interval: int) -> None:
    if (batch + 1) % interval:
        (log / str(batch)).write_text(_EMPTY_ENTRY)
        return
    since = max((b for b in compacted if b < batch), default=-1)
    lines = [line for b in sorted(b for b in logged if since <= b < batch) for line in _entries(log, b, compacted)]
    (log / f"{batch}{_COMPACT}").write_text("\n".join([_EMPTY_ENTRY, *lines]))
    compacted.add(batch)


def align_file_sink_log(
    checkpoint: Location, sink_description: str | None, compact_interval: int = DEFAULT_COMPACT_INTERVAL
) -> SinkLogAlignment:
    """Give committed batches the sink never saw their entries, and remove empty entries past the last committed
    batch (see module docstring). ``compact_interval``: the session's, used only before the log's first compaction."""
    path = file_sink_path(sink_description)
    if path is None:
        return SinkLogAlignment()
    log = location_of(
        path.removeprefix("file:") if path.startswith("file:/") and not path.startswith("file://") else path
    )
    log = log / "_spark_metadata"
    compacted = set(_ids(log, _COMPACT))
    logged = set(_ids(log)) | compacted
    if not logged:
        return SinkLogAlignment()
    commits = _ids(checkpoint / "commits")
    last_committed = commits[-1] if commits else -1
    cleared = []
    for batch in sorted(logged, reverse=True):  # a tail only: the log never gets a hole
        if batch <= last_committed or batch in compacted or (log / str(batch)).read_text().strip() != _EMPTY_ENTRY:
            break
        (log / str(batch)).unlink()
        logged.discard(batch)
        cleared.append(batch)
    latest = max(logged, default=-1)
    filled = [b for b in commits if b > latest]
    interval = _compact_interval(compacted, compact_interval)
    for batch in filled:
        _fill(log, batch, logged, compacted, interval)
        logged.add(batch)
    return SinkLogAlignment(filled, cleared)
