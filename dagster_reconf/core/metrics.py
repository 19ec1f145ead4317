"""The metrics store: an append-only JSON-lines file per stream.

Why a file of JSON lines: the driver appends one line per progress event (about one a
second), and readers in other processes (CLI, Dagster sensors) read it while the driver
runs, incrementally, from a byte cursor, with no server to keep up. Every line is
flushed and fsynced before the next batch can be reported, so a crash loses nothing
that was reported. A reader leaves a torn last line (a write in progress) for its next
read instead of failing.

Records are ``{"kind": "progress" | "lifecycle", "stream": ..., "recorded_at": ...}``
plus ``progress`` (Spark's ``StreamingQueryProgress`` JSON, and in local mode
``python_cpu_s``: the Python task workers' CPU seconds so far, see ``python_workers``)
or ``event`` (what the runtime did: started, stopped, restarted with which settings).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["MetricsStore", "progress_frame", "progress_row", "status_figures"]

_TAIL_CHUNK_BYTES = 64 * 1024
STATUS_FIGURES = (
    "batch_id", "input_rows_per_second", "processed_rows_per_second", "batch_duration_ms", "backlog_events", "watermark",
)


class MetricsStore:
    """Append-only JSON-lines store of one stream's progress and lifecycle records."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        """Append one record durably (flush + fsync)."""
        line = json.dumps({"recorded_at": time.time(), **record}, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())

    def read(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Records after byte ``cursor``, and the cursor to pass next time.

        A last line without its newline is a write in progress: it is left unread.
        A complete line that is not JSON is corruption and raises ``ValueError``.
        """
        if not self.path.exists():
            return [], cursor
        with open(self.path, "rb") as fh:
            fh.seek(cursor)
            data = fh.read()
        complete = data.rfind(b"\n") + 1
        records = []
        for offset, raw in _lines(data[:complete], cursor):
            try:
                records.append(json.loads(raw))
            except json.JSONDecodeError as exc:
                raise ValueError(f"metrics store {self.path} is corrupt at byte {offset}: {exc.msg}") from None
        return records, cursor + complete

    def tail_offset(self, max_bytes: int) -> int:
        """A cursor at most ``max_bytes`` before the end, at a line start (to read only the recent past)."""
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size <= max_bytes:
                return 0
            fh.seek(size - max_bytes)
            skipped = fh.readline()  # a partial line
            return size - max_bytes + len(skipped)

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def progress(self, cursor: int = 0) -> list[dict[str, Any]]:
        """Spark progress events (dicts) after ``cursor``."""
        return [r["progress"] for r in self.read(cursor)[0] if r.get("kind") == "progress"]

    def last_progress(self) -> dict[str, Any] | None:
        """The newest progress event, found from the end of the file (the store grows all day).

        Reads a growing window from the end until it holds a complete progress line;
        progress lines come every batch, so the first 64 KiB almost always suffice.
        """
        if not self.path.exists():
            return None
        with open(self.path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            window = _TAIL_CHUNK_BYTES
            while True:
                start = max(0, size - window)
                fh.seek(start)
                data = fh.read(size - start)
                first = data.find(b"\n") + 1 if start > 0 else 0  # skip a partial first line
                complete = data[first : data.rfind(b"\n") + 1]  # and a torn last one
                for raw in reversed(complete.split(b"\n")):
                    if raw.strip():
                        record = json.loads(raw)
                        if record.get("kind") == "progress":
                            return record["progress"]
                if start == 0:
                    return None
                window *= 4


def _lines(data: bytes, base: int) -> Iterable[tuple[int, bytes]]:
    offset = base
    for raw in data.splitlines(keepends=True):
        if raw.strip():
            yield offset, raw
        offset += len(raw)


def _index(offset: Any) -> int | None:
    """Event index from a source offset (a dict or its JSON text), None if absent."""
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except json.JSONDecodeError:
            return None
    if isinstance(offset, dict) and "index" in offset:
        return int(offset["index"])
    return None


def progress_row(progress: dict[str, Any]) -> dict[str, Any]:
    """Flatten one ``StreamingQueryProgress`` into the figures the control plane uses.

    ``backlog_events`` is the source's offered events minus the batch's end offset:
    how far behind the stream is when the batch ended. ``events`` is how many source
    events the batch consumed (end minus start offset); Spark's ``num_input_rows``
    counts a source once per scan, so a self-join (Q3, Q8) reports twice the events.
    """
    sources = progress.get("sources") or [{}]
    end = sum(i for i in (_index(s.get("endOffset")) for s in sources) if i is not None)
    start = sum(i for i in (_index(s.get("startOffset")) for s in sources) if i is not None)
    latest_known = [_index(s.get("latestOffset")) for s in sources]
    latest = sum(i for i in latest_known if i is not None)
    durations = progress.get("durationMs") or {}
    row = {
        "batch_id": int(progress.get("batchId", -1)),
        "timestamp": pd.Timestamp(progress.get("timestamp")) if progress.get("timestamp") else pd.NaT,
        "num_input_rows": int(progress.get("numInputRows", 0)),
        "events": end - start,
        "input_rows_per_second": float(progress.get("inputRowsPerSecond") or 0.0),
        "processed_rows_per_second": float(progress.get("processedRowsPerSecond") or 0.0),
        "batch_duration_ms": int(durations.get("triggerExecution", 0)),
        "add_batch_ms": int(durations.get("addBatch", 0)),
        "end_offset": end,
        "latest_offset": latest if any(i is not None for i in latest_known) else None,
        "backlog_events": max(0, latest - end) if any(i is not None for i in latest_known) else None,
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "state_rows": sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators") or []),
    }
    for op in progress.get("stateOperators") or []:
        row[f"state_rows.{op.get('operatorName', 'operator')}"] = int(op.get("numRowsTotal", 0))
    return row


def status_figures(progress: dict[str, Any] | None) -> dict[str, Any]:
    """What a status shows of the last batch: the figures and state rows per operator."""
    row = progress_row(progress) if progress else {}
    figures = {k: row.get(k) for k in STATUS_FIGURES}
    figures["state_rows"] = {k.split(".", 1)[1]: v for k, v in row.items() if k.startswith("state_rows.")}
    return figures


def progress_frame(progress: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per progress event (see :func:`progress_row`), ordered by batch."""
    rows = [progress_row(p) for p in progress]
    if not rows:
        return pd.DataFrame(columns=["batch_id", "timestamp", "num_input_rows", "backlog_events"])
    return pd.DataFrame(rows).sort_values(["batch_id", "timestamp"]).reset_index(drop=True)
