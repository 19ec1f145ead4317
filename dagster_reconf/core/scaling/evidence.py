"""The evidence a scaling decision reads: the current configuration's recent batches.

A stream's metrics store interleaves lifecycle records (``started``, ``restarted``
with the new settings and how long the restart took) and one progress record per
batch. :class:`ConfigurationWindow` follows it incrementally: the settings in force,
when they took effect (the *epoch*, which names the configuration in plan hashes),
the newest batches since then (compact rows, bounded), and measured restart times.
It is JSON-serializable, so a sensor keeps it in its cursor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from dagster_reconf.core.progress.lifecycle import (
    Paused,
    QueryStarted,
    QueryTerminated,
    Restarted,
    SettingsKnown,
    Started,
    lifecycle_event,
)
from dagster_reconf.core.scaling.cost_split import fit_task_costs
from dagster_reconf.core.scaling.policy import Decision, ScalingPolicy
from dagster_reconf.core.scaling.profile import ProfileError, StreamProfile
from dagster_reconf.core.scaling.profiling import profile_stream
from dagster_reconf.core.scaling.scaling_plan import Knobs
from dagster_reconf.core.scaling.signal import Signal, observe
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import record_row
from dagster_reconf.core.traces.store import TraceStore

__all__ = ["ConfigurationWindow", "decide", "describe_epoch", "ingest_and_read", "settled_batches", "shared_cpus"]

KEPT_ROWS = 60
KEPT_SAMPLE_ROWS = 12  # the newest rows keep their Python CPU samples (a window decides on fewer; cursors stay small)
_ROW_FIELDS = (
    "batch_id",
    "query_id",
    "timestamp",
    "events",
    "batch_duration_ms",
    "end_offset",
    "latest_offset",
    "offered_after_s",
    "backlog_events",
    "backlog_unknown",
    "python_cpu_s",
    "python_cpu_samples",
    "state_commit_ms",
    "python_workers",
    "python_task_cpu_ms",
    "kafka_partitions",
    "declared_rate",
    "source_kinds",
    "batch_units",
    "cap_option",
)


def describe_epoch(epoch: str) -> str:
    """A configuration's epoch (``started@1796153114.481``, an identifier) for a person: ``started 2026-12-01
    21:45:14 UTC``."""
    event, _, at = epoch.partition("@")
    try:
        when = datetime.fromtimestamp(float(at), tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return epoch or "-"
    return f"{event} {when:%Y-%m-%d %H:%M:%S} UTC"


@dataclass
class ConfigurationWindow:
    """The configuration in force and its newest batches (see module docstring)."""

    spec: dict[str, Any] | None = None
    epoch: str = ""
    started_at: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    restart_seconds: list[float] = field(default_factory=list)
    lead_seconds: list[float] = field(default_factory=list)  # reconfigurations' steps before their pause
    previous: dict[str, Any] | None = None  # the configuration before: spec, started_at, rows (see fit_task_costs)
    terminated: bool = False  # its query stopped (an attached application's, say) and has not started again
    ended_at: float | None = None  # when it stopped (its last batch's end, for an attached application's)
    end_exception: str | None = None  # Spark's message where it failed
    run_id: str | None = None  # the query run started last: the end of an older one (reported late) is not its end

    def update(self, records: Iterable[dict[str, Any]], keep: int = KEPT_ROWS) -> "ConfigurationWindow":
        """Fold new metrics-store records in (in order)."""
        for record in records:
            event = lifecycle_event(record)
            if isinstance(event, SettingsKnown) and event.spec:
                self.spec = event.spec  # the same configuration, better known (an attached stream's trigger)
            elif isinstance(event, (Started, Restarted)) and event.spec:
                if self.spec and self.rows:
                    self.previous = {"spec": self.spec, "started_at": self.started_at, "rows": self.rows[-keep:]}
                self.spec = event.spec
                self.started_at = float(event.recorded_at or 0.0)
                self.epoch = f"{event.EVENT}@{self.started_at:.3f}"
                self.rows = []
                self.terminated, self.ended_at, self.end_exception = False, None, None
                if isinstance(event, Restarted) and event.seconds is not None:
                    self.restart_seconds = [*self.restart_seconds[-19:], float(event.seconds)]
            elif isinstance(event, Paused) and event.lead_s is not None:
                self.lead_seconds = [*self.lead_seconds[-19:], float(event.lead_s)]
            elif isinstance(event, QueryStarted):
                self.run_id = event.run_id
                self.terminated, self.ended_at, self.end_exception = False, None, None
            elif isinstance(event, QueryTerminated) and _ends_current(event, self.run_id):
                self.terminated, self.ended_at, self.end_exception = True, event.recorded_at, event.exception
            elif record.get("kind") == "progress":
                row = {
                    **record_row(record),
                    "python_cpu_s": record.get("python_cpu_s"),
                    "python_cpu_samples": record.get("python_cpu_samples"),
                    "python_workers": record.get("python_workers"),
                    "python_task_cpu_ms": record.get("python_task_cpu_ms"),
                }
                self.rows.append({k: (str(row[k]) if k == "timestamp" else row[k]) for k in _ROW_FIELDS})
        self.rows = self.rows[-keep:]
        for row in self.rows[:-KEPT_SAMPLE_ROWS]:
            row["python_cpu_samples"] = None
        return self

    def frame(self) -> pd.DataFrame:
        """The batches as a progress frame (timestamps parsed)."""
        return _frame(self.rows)

    def settled(self, stabilization_s: float) -> pd.DataFrame:
        """The configuration's batches that are evidence of it (see :func:`settled_batches`)."""
        return settled_batches(self.frame(), self.started_at, stabilization_s)

    def stream_spec(self) -> StreamSpec | None:
        return StreamSpec.parse(self.spec) if self.spec else None

    @property
    def restart_s(self) -> float | None:
        """Median measured restart time, None before any restart."""
        return float(pd.Series(self.restart_seconds).median()) if self.restart_seconds else None

    @property
    def lead_s(self) -> float | None:
        """Median measured time from a reconfiguration's start to its pause, None before any."""
        return float(pd.Series(self.lead_seconds).median()) if self.lead_seconds else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "ConfigurationWindow":
        return cls(**data) if data else cls()


def _ends_current(event: QueryTerminated, current_run: str | None) -> bool:
    """Whether ``event`` ends the query run started last. Spark tells its listeners of a query's start at once and of
    its end later, so a restart's new run can be recorded before the old run's end."""
    return event.run_id is None or current_run is None or event.run_id == current_run


def decide(
    policy: ScalingPolicy,
    window: ConfigurationWindow,
    now: float,
    activities: Callable[[float, float], pd.DataFrame] | None = None,
    *,
    plan: bool = True,
) -> Decision:
    """The policy's decision for the configuration in ``window``.

    Args:
        policy: a policy from :mod:`dagster_reconf.core.scaling.policy`.
        window: the configuration and its batches.
        now: wall-clock seconds (``time.time()``).
        activities: ``(start_ms, end_ms) -> activity table`` (e.g. ``TraceStore.activities``
            after an ingest); read only when the decision needs a profile.
        plan: False: stop at the direction (no traces read, no plan made).
    """
    spec = window.stream_spec()
    if spec is None:
        return Decision(
            "hold", "no configuration recorded yet: the stream has not started", _empty_observation(), judged=False
        )
    if spec.trigger_from == "definition" and policy.config.plan_trigger:  # the user's trigger: plans keep it
        policy = type(policy)(policy.config.model_copy(update={"plan_trigger": False}))
    cfg = policy.config
    frame = window.settled(cfg.stabilization_s)
    knobs = Knobs.of(spec)
    obs = observe(frame, spec.trigger_interval_s, now - window.started_at, cfg.warmup_batches, cfg.scale_down_delay_s)
    if window.terminated:
        at = "" if window.ended_at is None else time.strftime(" at %Y-%m-%d %H:%M:%S UTC", time.gmtime(window.ended_at))
        return Decision(
            "hold", f"its query ended{at}: nothing to decide until it runs again", obs, current=knobs, judged=False
        )

    def profile() -> StreamProfile | None:
        if activities is None:
            return None
        current = _profile(activities, spec, frame, cfg.warmup_batches)
        if current is None or not window.previous:
            return current
        before = StreamSpec.parse(window.previous["spec"])
        earlier = _profile(
            activities,
            before,
            settled_batches(_frame(window.previous["rows"]), window.previous["started_at"], cfg.stabilization_s),
            cfg.warmup_batches,
        )
        return current if earlier is None else fit_task_costs(current, earlier)

    return policy.decide(
        spec.name, knobs, obs, profile, epoch=window.epoch, restart_s=window.restart_s, lead_s=window.lead_s, plan=plan
    )


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(_ROW_FIELDS))
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True, format="ISO8601")
    return frame


def settled_batches(frame: pd.DataFrame, started_at: float, stabilization_s: float) -> pd.DataFrame:
    """Batches of one configuration that are evidence of it: a restarted stream warms up, so those that started
    within ``stabilization_s``, and those up to the last that ran more Python workers than any before, are left out.

    A new Python worker's first task imports PySpark and the task's code: seconds on busy CPUs. A new
    SparkContext forks its workers over its first batches, not all in the first, and a profile would read those
    stragglers as costs of every batch.
    """
    settled = frame[frame["timestamp"] >= pd.Timestamp(started_at + stabilization_s, unit="s", tz="UTC")]
    if "python_workers" in frame:
        ordered = frame.sort_values("batch_id")
        counts = pd.to_numeric(ordered["python_workers"], errors="coerce")
        grew = ordered.loc[counts > counts.cummax().shift(), "batch_id"]  # more than ever before (not one re-forked)
        if len(grew):
            settled = settled[settled["batch_id"] > grew.max()]
    return settled.reset_index(drop=True)


def _profile(
    activities: Callable[[float, float], pd.DataFrame], spec: StreamSpec, frame: pd.DataFrame, warmup_batches: int
) -> StreamProfile | None:
    """The profile of one configuration's settled batches, None where traces do not cover them."""
    if frame.empty:
        return None
    lo = frame["timestamp"].min().timestamp() * 1000.0 - spec.trigger_interval_s * 1000.0
    hi = frame["timestamp"].max().timestamp() * 1000.0 + 60_000.0
    try:
        return profile_stream(
            activities(lo, hi), frame, Knobs.of(spec), warmup_batches=warmup_batches, cpus=shared_cpus(spec)
        )
    except ProfileError:
        return None


def shared_cpus(spec: StreamSpec) -> float:
    """CPUs a stream's task slots share: the machine's in local mode, one per slot on a cluster (unbounded)."""
    return float(os.cpu_count() or 1) if spec.master.startswith("local") else float("inf")


def ingest_and_read(
    store: TraceStore, event_log_dir: Any, max_events: int | None = None, query_ids: Collection[str] | None = None
) -> Callable[[float, float], pd.DataFrame]:
    """``activities`` for :func:`decide`: ingest what is new in the event logs (at most ``max_events``), then read the
    window: only ``query_ids``' activities where given (an attached application's log holds its other queries too)."""

    def read(lo: float, hi: float) -> pd.DataFrame:
        store.ingest(event_log_dir, max_events=max_events)
        return store.activities(lo, hi, query_ids=query_ids)

    return read


def _empty_observation() -> Signal:
    return Signal(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
