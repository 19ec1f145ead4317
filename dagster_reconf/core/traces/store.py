"""A stream's trace store: incremental ingestion of its event logs into activity chunks.

A stream's event-log directory holds one log per Spark application (every driver or
SparkContext restart starts a new one). For each log the store keeps a cursor and the
normalizer's state in ``state.json``; each :meth:`TraceStore.ingest` reads only what is
new and appends the new activities as one Parquet chunk, listed with its time range in
the same state file (written atomically after the chunk). Snapshots then read only the
chunks that overlap their window, so a window can be (re)materialized at any time.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.storage import Location, location_of
from dagster_reconf.core.traces.activities import TraceNormalizer
from dagster_reconf.core.traces.event_schema import ACTIVITY_COLUMNS, EVENT_SCHEMA, USED_EVENTS
from dagster_reconf.core.traces.event_table import TableReadResult, read_event_table
from dagster_reconf.core.traces.eventlog import EventLogError, LogCursor, ReadResult, read_events

__all__ = ["IngestReport", "TraceStore", "application_logs", "normalize_log"]

TASK_END = "SparkListenerTaskEnd"


def normalize_log(
    log: Location,
    cursor: LogCursor | None = None,
    normalizer: TraceNormalizer | None = None,
    max_events: int | None = None,
) -> tuple[pd.DataFrame, TraceNormalizer, ReadResult | TableReadResult]:
    """New activities of one application's log after ``cursor``.

    The whole log is parsed by DuckDB or Arrow where it can be, and normalized part by
    part while the next part is read (see :func:`read_event_table`); a log with a line
    they refuse is read line by line, task ends still columnar. Returns the rows, the
    normalizer to continue with (a whole read works on a copy of ``normalizer``, so a
    refused line leaves it as it was) and the read's result.
    """
    normalizer = normalizer or TraceNormalizer()
    if max_events is None:
        working = copy.deepcopy(
            normalizer
        )  # a line refused after parts were normalized: start over from ``normalizer``
        fast = read_event_table(log, cursor, schema=EVENT_SCHEMA, used=USED_EVENTS, on_table=working.add_table)
        if fast is not None:
            return working.take_rows(), working, fast
    result = read_events(log, cursor, max_events=max_events, only=USED_EVENTS - {TASK_END}, raw=frozenset({TASK_END}))
    normalizer.add(result.events)
    normalizer.add_task_lines(result.raw)
    return normalizer.take_rows(), normalizer, result


_APP_LOG = re.compile(r"^(eventlog_v2_.+|(local|app|application)-[\w\-]+?(\.(lz4|lzf|snappy|zstd))?(\.inprogress)?)$")


def application_logs(event_log_dir: Location) -> list[Location]:
    """Each application's event log (file or rolling directory) under ``event_log_dir``, oldest first."""
    if not event_log_dir.is_dir():
        return []
    logs = []
    for path in event_log_dir.iterdir():
        if _APP_LOG.match(path.name) and (current := _current_name(path)) is not None:
            try:
                logs.append((current.stat().st_mtime, current))
            except FileNotFoundError:  # renamed between the check and the stat: found on the next read
                continue
    return [path for _, path in sorted(logs)]


def _current_name(path: Location) -> Location | None:
    """``path``, or its completed name once Spark has renamed ``x.inprogress`` to ``x`` (None if neither exists)."""
    if path.exists():
        return path
    completed = path.with_name(_log_key(path))
    return completed if completed.exists() else None


def _log_key(path: Location) -> str:
    """A log's identity, stable when Spark renames ``x.inprogress`` to ``x``."""
    return path.name.removesuffix(".inprogress")


def _resumed_normalizer(entry: dict[str, Any]) -> TraceNormalizer:
    """The normalizer of one log as its last ingestion left it (new if never read)."""
    return TraceNormalizer.from_state(entry["normalizer"]) if "normalizer" in entry else TraceNormalizer()


@dataclass
class IngestReport:
    """What one ingestion read: events, new activities, skips by reason, time range."""

    events: int = 0
    activities: int = 0
    skipped: Counter = field(default_factory=Counter)  # by this ingestion
    total_skipped: Counter = field(default_factory=Counter)  # by every ingestion of these logs so far
    start_ms: float | None = None
    end_ms: float | None = None


class TraceStore:
    """Activities of one stream under ``root`` (``<stream dir>/traces`` by default)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.state_path = self.root / "state.json"

    def _state(self) -> dict[str, Any]:
        if not self.state_path.exists():
            return {"version": 1, "logs": {}, "chunks": []}
        return json.loads(self.state_path.read_text())

    def _write_state(self, state: dict[str, Any]) -> None:
        replace_text(self.state_path, json.dumps(state))

    def ingest(self, event_log_dir: Location | str, max_events: int | None = None) -> IngestReport:
        """Read what is new in every application log under ``event_log_dir``; append it as a chunk.

        Several processes ingest the same store (a sensor tick, a snapshot run, a plan run):
        a file lock makes each read-append-advance atomic, so none re-reads what another
        appended or overwrites its chunk.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / ".ingest.lock"):
            return self._ingest(location_of(event_log_dir), max_events)

    def _ingest(self, event_log_dir: Location, max_events: int | None) -> IngestReport:
        state = self._state()
        report = IngestReport()
        frames = []
        for log in application_logs(event_log_dir):
            key = _log_key(log)
            entry = state["logs"].get(key, {})
            cursor = LogCursor.from_json(entry.get("cursor"))
            normalizer = _resumed_normalizer(entry)
            before = Counter(normalizer.skipped)
            try:
                rows, normalizer, result = normalize_log(log, cursor, normalizer, max_events)
            except (FileNotFoundError, EventLogError) as exc:
                # Spark completed the application while we read: its log now has its final name.
                if (completed := _current_name(log)) is None or completed == log:
                    if isinstance(exc, EventLogError):  # a file among the logs that is none: said, and the rest read
                        report.skipped[f"not an event log: {log.name}"] += 1
                        report.total_skipped[f"not an event log: {log.name}"] += 1
                        continue
                    raise
                normalizer = _resumed_normalizer(entry)  # the failed read may have fed the first one
                rows, normalizer, result = normalize_log(completed, cursor, normalizer, max_events)
            frames.append(rows)
            new_skips = Counter(result.skipped) + (normalizer.skipped - before)
            log_skips = Counter(entry.get("skipped", {})) + Counter(result.skipped)
            report.events += result.events_read
            report.skipped.update(new_skips)
            report.total_skipped.update(log_skips + normalizer.skipped)
            state["logs"][key] = {
                "cursor": result.cursor.to_json(),
                "normalizer": normalizer.state(),
                "skipped": dict(log_skips),
            }
        new = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ACTIVITY_COLUMNS)
        if len(new):
            index = len(state["chunks"])
            name = f"activities-{index:06d}.parquet"
            new.to_parquet(self.root / name, index=False)
            report.start_ms, report.end_ms = float(new["start_ms"].min()), float(new["end_ms"].max())
            state["chunks"].append(
                {"file": name, "start_ms": report.start_ms, "end_ms": report.end_ms, "rows": len(new)}
            )
        report.activities = len(new)
        self._write_state(state)
        return report

    def time_range(self) -> tuple[float, float] | None:
        """Earliest start and latest end over everything ingested, or None."""
        chunks = self._state()["chunks"]
        if not chunks:
            return None
        return min(c["start_ms"] for c in chunks), max(c["end_ms"] for c in chunks)

    def activities(self, start_ms: float, end_ms: float, query_ids: Collection[str] | None = None) -> pd.DataFrame:
        """Activities overlapping ``[start_ms, end_ms)`` (unclipped; the snapshot clips).

        Args:
            query_ids: only the jobs of these streaming queries (one stream's; a driver may run several
                queries, and the control plane's replays and probes run under their own ids). None: every job.
        """
        files = [
            self.root / c["file"] for c in self._state()["chunks"] if c["start_ms"] < end_ms and c["end_ms"] >= start_ms
        ]
        if not files:
            return pd.DataFrame(columns=ACTIVITY_COLUMNS)
        frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        keep = (frame["start_ms"] < end_ms) & (frame["end_ms"] >= start_ms)
        if query_ids is not None:
            keep &= frame["query_id"].isin(list(query_ids))
        return frame[keep].reset_index(drop=True)
