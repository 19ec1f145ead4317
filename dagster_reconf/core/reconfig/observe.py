"""What a reconfiguration did to the stream, measured from its progress records.

Figures (seconds):

* ``pause_s``: the query was not running (pause begin to resume end);
* ``downtime_s``: pause begin to the first batch committed after the resume;
* ``catch_up_s``: resume to the first batch whose backlog is back to normal (the
  backlog of the batches before the pause, at least one trigger's worth of events);
* ``max_event_latency_s``: over the batches from the pause on, the longest time an
  event waited between being offered by the source and its batch being committed.

When was an event offered? The source says, at every batch it plans, how far it has
offered (its latest position: the batch's end plus the backlog, in events, see
:mod:`dagster_reconf.core.progress.source_kinds`). Those samples make a curve from time to position;
an event at position ``p`` was offered when the curve reached ``p``, interpolated between
samples (through a pause, where there are none, the source is taken to offer at an even
rate). So the figures come from the source's own backlog, whatever the source is.

Pure functions over progress records, so they are unit-tested without Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from dagster_reconf.core.progress.lifecycle import Restarted, Started, lifecycle_event
from dagster_reconf.core.reconfig.step_results import RecentPace
from dagster_reconf.core.store.metrics import record_row

__all__ = [
    "Observation",
    "committed_batches",
    "normal_backlog",
    "observe_change",
    "offered_rate",
    "recent_backlog",
]

RECENT_BATCHES = 20  # the batches before a pause that say what its normal backlog and pace are

_COLUMNS = [
    *("batch_id", "run_id", "started_at", "committed_at", "events", "backlog_events", "end", "offered", "latency_s")
]


@dataclass(frozen=True)
class Observation:
    """How the stream went through a reconfiguration (see module docstring)."""

    pause_s: float
    downtime_s: float | None
    catch_up_s: float | None
    max_event_latency_s: float | None
    batches_observed: int
    caught_up: bool
    normal_backlog_events: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def committed_batches(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per progress record: start and commit time, backlog, the source's position after the batch (``end``,
    where its offsets count events) and offered, and the oldest event's wait (``latency_s``; NaN where the source's
    backlog is unknown)."""
    rows = []
    for record in records:
        if record.get("kind") != "progress":
            continue
        progress = record["progress"]
        row = record_row(record)
        started = (
            pd.Timestamp(progress["timestamp"]).timestamp() if progress.get("timestamp") else record["recorded_at"]
        )
        rows.append(
            {
                "batch_id": row["batch_id"],
                "run_id": progress.get("runId"),
                "started_at": started,
                "committed_at": started + row["batch_duration_ms"] / 1000.0,
                "events": row["events"],
                "backlog_events": row["backlog_events"],
                "end": row["end_offset"],
            }
        )
    frame = pd.DataFrame(
        rows, columns=["batch_id", "run_id", "started_at", "committed_at", "events", "backlog_events", "end"]
    )
    if frame.empty:
        return frame.assign(offered=pd.Series(dtype=float), latency_s=pd.Series(dtype=float))[_COLUMNS]
    events = frame["events"].astype(float)
    # Positions where the offsets count events; otherwise events consumed since the first record.
    end = frame["end"].astype(float) if frame["end"].notna().all() else events.cumsum()
    backlog = frame["backlog_events"].astype(float)
    frame["offered"] = end + backlog
    first = (end - events).to_numpy()  # the position of each batch's oldest event
    known = frame["offered"].notna().to_numpy()
    times, offered = frame["started_at"].to_numpy(dtype=float)[known], frame["offered"].to_numpy(dtype=float)[known]
    order = np.argsort(times, kind="stable")
    times, offered = times[order], np.maximum.accumulate(offered[order]) if len(order) else offered
    latency = np.full(len(frame), np.nan)
    if len(times):
        when = np.interp(first + 1, offered, times, left=times[0])
        latency = np.where(events.to_numpy() > 0, np.maximum(0.0, frame["committed_at"].to_numpy() - when), 0.0)
        latency[~known & (events.to_numpy() > 0)] = np.nan
    frame["latency_s"] = latency
    return frame[_COLUMNS]


def offered_rate(batches: pd.DataFrame) -> float | None:
    """Events per second the source offered over ``batches`` (None where its backlog is unknown)."""
    known = batches.dropna(subset=["offered"])
    if len(known) < 2:
        return None
    span = float(known["started_at"].iloc[-1] - known["started_at"].iloc[0])
    return max(0.0, float(known["offered"].iloc[-1] - known["offered"].iloc[0]) / span) if span > 0 else None


def normal_backlog(before: pd.DataFrame, rate: float | None, trigger_interval_s: float) -> float:
    """The backlog a healthy batch ends with: the median of the batches before the pause, at least a trigger's
    events."""
    floor = (rate or 0.0) * max(trigger_interval_s, 1.0)
    backlog = before["backlog_events"].dropna()
    return float(max(floor, 1.5 * backlog.median())) if len(backlog) else floor


def observe_change(batches: pd.DataFrame, *, paused_at: float, resumed_at: float, normal: float) -> Observation:
    """The figures of a reconfiguration from the committed batches (see module docstring)."""
    during = batches[batches["committed_at"] >= paused_at]
    after = during[during["committed_at"] >= resumed_at]
    first = after.iloc[0] if len(after) else None
    settled = after[after["backlog_events"].astype(float).fillna(float("inf")) <= normal]
    latency = during["latency_s"].dropna()
    return Observation(
        pause_s=round(resumed_at - paused_at, 3),
        downtime_s=round(float(first["committed_at"]) - paused_at, 3) if first is not None else None,
        catch_up_s=round(float(settled.iloc[0]["committed_at"]) - resumed_at, 3) if len(settled) else None,
        max_event_latency_s=round(float(latency.max()), 3) if len(latency) else None,
        batches_observed=int(len(after)),
        caught_up=bool(len(settled)),
        normal_backlog_events=round(normal, 1),
    )


def recent_backlog(records: list[dict[str, Any]], trigger_interval_s: float) -> RecentPace:
    """The backlog of the batches before a pause (what "caught up" means afterwards) and their pace: median batch
    duration (``batch_s``) and time between commits (``seconds_per_batch``), from the metrics store's recent
    ``records``, of the configuration in force only (a trigger changed since sets another pace)."""
    recent = committed_batches(since_configured(records)[-4 * RECENT_BATCHES :]).tail(RECENT_BATCHES)
    rate = offered_rate(recent)
    committed = recent["committed_at"].astype(float)
    return RecentPace(
        normal_backlog_events=normal_backlog(recent, rate, trigger_interval_s),
        batches=len(recent),
        offered_events_per_s=rate,
        batch_s=float((committed - recent["started_at"].astype(float)).median()) if len(recent) else None,
        seconds_per_batch=float(committed.diff().median()) if len(recent) > 1 else None,
    )


def since_configured(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` after the last that started or restarted the stream: the configuration in force's."""
    for i in range(len(records) - 1, -1, -1):
        if isinstance(lifecycle_event(records[i]), (Started, Restarted)):
            return records[i + 1 :]
    return records
