"""One stream's scaling decision, read from its runtime home: what ``reconf plan`` prints and ``ds2_plans`` records.

The decision is the policy's on the configuration in force and its recent batches (the metrics store's tail) and
their traces (ingested from the stream's event logs on demand). An attached stream's event logs are read first. An
attached application whose query ended gets advice for its next run instead of a hold: the same decision, made on
the last window of the run as it stood when the query ended, labelled as such and never applied.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide, ingest_and_read
from dagster_reconf.core.scaling.policy import Decision, ScalingPolicy
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.traces.store import TraceStore

__all__ = ["NEXT_RUN", "RECENT_METRICS_BYTES", "EvidenceSpan", "StreamDecision", "decide_stream", "recent_window"]

RECENT_METRICS_BYTES = 8 << 20  # about 45 minutes of 1-second batches
NEXT_RUN = "for the next run: "  # how advice for an ended application's next run starts


@dataclass(frozen=True)
class EvidenceSpan:
    """The batches a decision read: the configuration's epoch and its settled batches (first and last)."""

    epoch: str
    batches: int
    first_batch: int | None = None
    last_batch: int | None = None
    first_at: str | None = None  # ISO time of the first batch
    last_at: str | None = None

    @classmethod
    def of(cls, window: ConfigurationWindow, stabilization_s: float) -> EvidenceSpan:
        frame = window.settled(stabilization_s)
        if frame.empty:
            return cls(window.epoch, 0)
        ids, times = frame["batch_id"], frame["timestamp"]
        return cls(
            window.epoch,
            len(frame),
            int(ids.min()),
            int(ids.max()),
            times.min().isoformat(),
            times.max().isoformat(),
        )


@dataclass(frozen=True)
class StreamDecision:
    """A stream's decision, with the evidence it read and whether it is advice for an ended application's next run."""

    stream: str
    decision: Decision
    evidence: EvidenceSpan
    attached: bool
    query_ended_at: float | None = None  # set where the query ended and has not started again
    query_exception: str | None = None
    for_next_run: bool = False

    @property
    def recommend_only(self) -> bool:
        """Never applied here: an attached stream, advice for a next run, or the policy's recommend-only mode."""
        return self.attached or self.for_next_run or self.decision.recommend_only

    def as_dict(self) -> dict[str, Any]:
        """The decision as JSON-ready values (``reconf plan --json``)."""
        plan = self.decision.plan
        return {
            "stream": self.stream,
            "action": self.decision.action,
            "reason": self.decision.reason,
            "for_next_run": self.for_next_run,
            "recommend_only": self.recommend_only,
            "attached": self.attached,
            "query_ended_at": _iso(self.query_ended_at),
            "query_exception": self.query_exception,
            "current": self.decision.current.model_dump() if self.decision.current else None,
            "plan": plan.model_dump() if plan else None,
            "step": self.decision.step.as_dict() if self.decision.step else None,
            "observation": self.decision.signal.as_dict(),
            "evidence": asdict(self.evidence),
        }


def recent_window(paths: StreamPaths) -> ConfigurationWindow:
    """The stream's configuration and recent batches, from the recent part of its metrics store."""
    store = MetricsStore(paths.metrics)
    records, _ = store.read(store.tail_offset(RECENT_METRICS_BYTES))
    window = ConfigurationWindow().update(records)
    if window.spec is None and paths.spec.is_file():  # configured before the tail: the settings from the spec file
        window = ConfigurationWindow(spec=json.loads(paths.spec.read_text()), epoch="before-recent-metrics").update(
            records
        )
    return window


def decide_stream(home: Path | str, stream: str, policy: ScalingPolicy, now: float | None = None) -> StreamDecision:
    """``policy``'s decision for ``stream`` under ``home`` (see module docstring); traces are read only if a plan is
    made. ``now``: wall-clock seconds (default: the clock)."""
    paths = StreamPaths(Path(home), stream)
    attached = paths.attached.is_file()
    if attached:
        from dagster_reconf.core.traces.attach import AttachedReader

        AttachedReader(paths).refresh()
    window = recent_window(paths)
    activities = ingest_and_read(TraceStore(paths.traces), paths.event_log, query_ids=paths.query_ids or None)
    ended = (window.ended_at, window.end_exception) if window.terminated else (None, None)
    next_run = attached and window.terminated and bool(window.rows)
    if next_run:  # decide as of the query's end, on the run's last window
        last = window.frame()["timestamp"].max().timestamp()
        window = replace(window, terminated=False)
        now = max(window.ended_at or last, last)
    decision = decide(policy, window, time.time() if now is None else now, activities)
    if next_run:
        decision = replace(decision, reason=NEXT_RUN + decision.reason, recommend_only=True)
    return StreamDecision(
        stream,
        decision,
        EvidenceSpan.of(window, policy.config.stabilization_s),
        attached,
        query_ended_at=ended[0],
        query_exception=ended[1],
        for_next_run=next_run,
    )


def _iso(timestamp: float | None) -> str | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, timezone.utc).isoformat()
