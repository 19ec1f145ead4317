"""What a reconfiguration did to the stream, measured from its progress records.

Figures (seconds):

* ``pause_s``: the query was not running (pause begin to resume end);
* ``downtime_s``: pause begin to the first batch committed after the resume;
* ``catch_up_s``: resume to the first batch whose backlog is back to normal (the
  backlog of the batches before the pause, at least one trigger's worth of events);
* ``max_event_latency_s``: over the batches from the pause on, the longest time an
  event waited between being offered by the source (known exactly: the bundled
  sources are paced by a wall-clock anchor) and its batch being committed.

Pure functions over progress records, so they are unit-tested without Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from ..metrics import progress_row

__all__ = ["Observation", "committed_batches", "normal_backlog", "observe_change"]


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


def committed_batches(records: Iterable[dict[str, Any]], anchor: dict[str, float], rate: float) -> pd.DataFrame:
    """One row per progress record: commit time, backlog, and the oldest event's wait (``latency_s``).

    Args:
        anchor: the source's pacing anchor (``start_time``, ``start_index``).
        rate: events offered per second since the anchor.
    """
    rows = []
    for record in records:
        if record.get("kind") != "progress":
            continue
        progress = record["progress"]
        row = progress_row(progress)
        started = pd.Timestamp(progress["timestamp"]).timestamp() if progress.get("timestamp") else record["recorded_at"]
        committed = started + row["batch_duration_ms"] / 1000.0
        first_event = row["end_offset"] - row["events"]  # index of the batch's oldest event
        offered = anchor["start_time"] + (first_event + 1 - anchor["start_index"]) / rate
        rows.append({"batch_id": row["batch_id"], "run_id": progress.get("runId"), "committed_at": committed,
                     "events": row["events"], "backlog_events": row["backlog_events"],
                     "latency_s": max(0.0, committed - offered) if row["events"] > 0 else 0.0})
    return pd.DataFrame(rows, columns=["batch_id", "run_id", "committed_at", "events", "backlog_events", "latency_s"])


def normal_backlog(before: pd.DataFrame, rate: float, trigger_interval_s: float) -> float:
    """The backlog a healthy batch ends with: the median of the batches before the pause, at least a trigger's events."""
    floor = rate * max(trigger_interval_s, 1.0)
    backlog = before["backlog_events"].dropna()
    return float(max(floor, 1.5 * backlog.median())) if len(backlog) else floor


def observe_change(batches: pd.DataFrame, *, paused_at: float, resumed_at: float, normal: float) -> Observation:
    """The figures of a reconfiguration from the committed batches (see module docstring)."""
    during = batches[batches["committed_at"] >= paused_at]
    after = during[during["committed_at"] >= resumed_at]
    first = after.iloc[0] if len(after) else None
    settled = after[after["backlog_events"].fillna(float("inf")) <= normal]
    return Observation(
        pause_s=round(resumed_at - paused_at, 3),
        downtime_s=round(float(first["committed_at"]) - paused_at, 3) if first is not None else None,
        catch_up_s=round(float(settled.iloc[0]["committed_at"]) - resumed_at, 3) if len(settled) else None,
        max_event_latency_s=round(float(during["latency_s"].max()), 3) if len(during) else None,
        batches_observed=int(len(after)),
        caught_up=bool(len(settled)),
        normal_backlog_events=round(normal, 1),
    )
