"""Keep Spark's file sink log in step with a checkpoint that gained batches without running the sink.

Spark's offline state repartition writes a batch N+1 into the checkpoint that reads no
input and writes no output, so the file sink's own log (``<path>/_spark_metadata/``)
never gets entry N+1. The sink compacts that log every ten batches and needs every
entry since the last compaction: ten batches after a repartition the stream fails with
``BATCH_METADATA_NOT_FOUND`` (measured with Spark 4.3). Before a query starts, every
committed checkpoint batch after the sink log's last entry is such a batch (the sink
writes its entry before the checkpoint commits a batch), so it gets the entry Spark
writes for a batch with no output files: ``v1`` and nothing else.
"""

from __future__ import annotations

import re

from .storage import Location, location_of

__all__ = ["align_file_sink_log", "file_sink_path"]

_FILE_SINK = re.compile(r"^FileSink\[(?P<path>.+)\]$")


def file_sink_path(sink_description: str | None) -> str | None:
    """The output path of Spark's file sink from its progress description (``FileSink[path]``), else None."""
    match = _FILE_SINK.match(sink_description or "")
    return match["path"] if match else None


def _ids(directory: Location, suffix: str = "") -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name[: len(p.name) - len(suffix)]) for p in directory.iterdir()
                  if p.name.endswith(suffix) and p.name[: len(p.name) - len(suffix) or None].isdigit())


def align_file_sink_log(checkpoint: Location, sink_description: str | None) -> list[int]:
    """Write empty file-sink log entries for committed batches the sink never saw; returns their ids."""
    path = file_sink_path(sink_description)
    if path is None:
        return []
    log = location_of(path.removeprefix("file:") if path.startswith("file:/") and not path.startswith("file://") else path)
    log = log / "_spark_metadata"
    logged = set(_ids(log)) | set(_ids(log, ".compact"))
    if not logged:
        return []
    latest = max(logged)
    missing = [b for b in _ids(checkpoint / "commits") if b > latest]
    for batch in missing:
        (log / str(batch)).write_text("v1")
    return missing
