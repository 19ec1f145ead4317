"""The metrics store: an append-only JSON-lines file per stream.

Why a file of JSON lines: the driver appends one line per progress event (about one a
second), and readers in other processes (CLI, Dagster sensors) read it while the driver
runs, incrementally, from a byte cursor, with no server to keep up. Every line is
flushed and fsynced before the next batch can be reported, so a crash loses nothing
that was reported. A reader leaves a torn last line (a write in progress) for its next
read instead of failing.

Records are ``{"kind": "progress" | "lifecycle", "stream": ..., "recorded_at": ...}``
plus ``progress`` (Spark's ``StreamingQueryProgress`` JSON, and in local mode
``python_cpu_s``: the Python task workers' CPU seconds so far, and ``python_cpu_samples``:
that counter sampled ten times a second since the batch before, see ``python_workers``)
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

from .sources import source_figures

__all__ = ["MetricsStore", "progress_frame", "progress_row", "record_row", "status_figures"]

_TAIL_CHUNK_BYTES = 64 * 1024
STATUS_FIGURES = (
    "batch_id", "input_rows_per_second", "processed_rows_per_second", "batch_duration_ms", "backlog_events",
    "backlog_unknown", "source_kinds", "watermark",
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
        """Progress records (Spark's progress event under ``progress``, and what the driver measured) after ``cursor``."""
        return [r for r in self.read(cursor)[0] if r.get("kind") == "progress"]

    def last_progress(self) -> dict[str, Any] | None:
        """The newest progress record, found from the end of the file (the store grows all day).

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
                            return record
                if start == 0:
                    return None
                window *= 4


def _lines(data: bytes, base: int) -> Iterable[tuple[int, bytes]]:
    offset = base
    for raw in data.splitlines(keepends=True):
        if raw.strip():
            yield offset, raw
        offset += len(raw)


def progress_row(progress: dict[str, Any], sources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Flatten one ``StreamingQueryProgress`` into the figures the control plane uses.

    Events and backlog come from each source's adapter (:mod:`.sources`), so they are in
    events whatever the source's offsets are: ``events`` is how many source events the
    batch consumed (Spark's ``num_input_rows`` counts a source once per scan, so a
    self-join reports twice its events), ``backlog_events`` how many waited behind it when
    it was planned (None when a source's backlog is unknown, with the reason in
    ``backlog_unknown``), ``end_offset``/``latest_offset`` the positions where the offsets
    count events. ``sources`` is what the driver measured besides the progress (a file
    source's unread files), one dict per source.
    """
    entries = progress.get("sources") or []
    figures = [source_figures(s, (sources or [])[i] if i < len(sources or []) else None) for i, s in enumerate(entries)]
    known = bool(figures) and all(f.backlog is not None for f in figures)
    positions = bool(figures) and all(f.end is not None for f in figures)
    end = sum(f.end for f in figures if f.end is not None) if positions else None
    backlog = sum(f.backlog for f in figures if f.backlog is not None) if known else None
    durations = progress.get("durationMs") or {}
    row = {
        "batch_id": int(progress.get("batchId", -1)),
        "query_id": progress.get("id"),
        "timestamp": pd.Timestamp(progress.get("timestamp")) if progress.get("timestamp") else pd.NaT,
        # An event log's progress leaves out the totals its sources carry (the listener's has both).
        "num_input_rows": int(progress.get("numInputRows", sum(int(e.get("numInputRows") or 0) for e in entries))),
        "events": sum(f.events for f in figures),
        "input_rows_per_second": float(progress.get("inputRowsPerSecond", sum(_rate(e, "inputRowsPerSecond") for e in entries))),
        "processed_rows_per_second": float(progress.get("processedRowsPerSecond",
                                                         sum(_rate(e, "processedRowsPerSecond") for e in entries))),
        "batch_duration_ms": int(durations.get("triggerExecution", 0)),
        "add_batch_ms": int(durations.get("addBatch", 0)),
        "end_offset": end,
        "latest_offset": end + backlog if end is not None and backlog is not None else None,
        "backlog_events": backlog,
        "backlog_unknown": None if known else "; ".join(
            f.detail.get("reason", f"{f.kind} source backlog unknown") for f in figures if f.backlog is None) or "no source",
        "source_kinds": ",".join(f.kind for f in figures),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "state_rows": sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators") or []),
        # Summed over the state stores' tasks; paid per batch and partition whatever the batch's size.
        "state_commit_ms": sum(int(op.get("commitTimeMs") or 0) for op in progress.get("stateOperators") or []),
    }
    for op in progress.get("stateOperators") or []:
        row[f"state_rows.{op.get('operatorName', 'operator')}"] = int(op.get("numRowsTotal", 0))
    return row


def _rate(source: dict[str, Any], key: str) -> float:
    value = source.get(key)
    try:
        return float(value) if value is not None else 0.0
    except (TypeError, ValueError):  # Spark writes NaN as a string where no time passed
        return 0.0


def record_row(record: dict[str, Any]) -> dict[str, Any]:
    """:func:`progress_row` of one metrics-store progress record (with what the driver measured besides)."""
    return progress_row(record["progress"], record.get("sources"))


def status_figures(record: dict[str, Any] | None) -> dict[str, Any]:
    """What a status shows of the last batch (a progress record): the figures and state rows per operator."""
    row = record_row(record) if record else {}
    figures = {k: row.get(k) for k in STATUS_FIGURES}
    figures["state_rows"] = {k.split(".", 1)[1]: v for k, v in row.items() if k.startswith("state_rows.")}
    return figures


def progress_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per progress record of the metrics store (see :func:`progress_row`), ordered by batch."""
    rows = [record_row(r) for r in records if r.get("kind") == "progress"]
    if not rows:
        return pd.DataFrame(columns=["batch_id", "timestamp", "num_input_rows", "backlog_events"])
    return pd.DataFrame(rows).sort_values(["batch_id", "timestamp"]).reset_index(drop=True)
