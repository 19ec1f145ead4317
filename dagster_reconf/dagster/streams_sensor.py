"""One light sensor over every stream of a runtime home: register, observe, and ask for a plan when one leaves its band.

A code location with dozens of streams needs one sensor, not one per stream, and its
ticks must stay cheap. Each tick, for every stream (in turn, within a time budget):

* registers it as a partition when the assets use dynamic partitions (a stream started
  with ``reconf stream start`` or attached with ``reconf stream attach`` needs no
  redeploy);
* reads only its new progress records (a byte cursor per stream; an attached stream's
  new event-log lines first), and keeps the ``stream`` asset's page current: its figures
  and its three checks (:mod:`~dagster_reconf.dagster.stream_page`);
* asks the policy which way the stream points, with no traces read: the guards
  (stabilization, a full window, catching up, the band, the scale-down delay) decide
  here, and a stream out of band gets a run of the scaling job. The run reads the event
  logs and makes the DS2 plan (``ds2_plans`` decides afresh), so event-log ingestion and
  DS2 never run in the sensor. ``run_key`` = ``stream|configuration epoch|direction``:
  one run per configuration and direction;
* puts a query that failed or a driver that died on the audit record
  (:mod:`~dagster_reconf.core.reconfig.incidents`), once each;
* says why it requested nothing, stream by stream, on every tick (in the skip reason
  and the tick's log).

Attached streams get the same runs: they record the recommendation and apply nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import dagster as dg

from dagster_reconf.core.ledger import AuditLedger, LedgerError
from dagster_reconf.core.reconfig.incidents import Incident, driver_died, query_failures, record_incidents
from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide
from dagster_reconf.core.scaling.policies import POLICIES
from dagster_reconf.core.scaling.policy import Decision, ScalingPolicy
from dagster_reconf.dagster.constants import DIRECTION_TAG, IN_FLIGHT, STREAM_TAG
from dagster_reconf.dagster.cursors import parse_cursor
from dagster_reconf.dagster.resources import AuditLedgerResource, StreamRuntimeResource
from dagster_reconf.dagster.scaling_assets import ScalingAssets
from dagster_reconf.dagster.scaling_sensor import evidence_request, held_by, next_run_advice, window_times
from dagster_reconf.dagster.stream_page import page_events
from dagster_reconf.dagster.trace_assets import TraceAssets

__all__ = ["StreamDirection", "StreamRead", "StreamsCursor", "build_streams_sensor", "stream_tick"]

CURSOR_VERSION = 1
FIRST_READ_BYTES = 1 << 20  # a stream first seen: its newest records only (a window's batches are a few KB)


@dataclass
class StreamsCursor:
    """Per stream: where its metrics store was read to, its configuration window, the last run key requested."""

    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    resume_at: str = ""  # the first stream the time budget left out last tick

    def serialize(self) -> str:
        return json.dumps({"version": CURSOR_VERSION, "streams": self.streams, "resume_at": self.resume_at})

    @classmethod
    def parse(cls, raw: str | None, context: dg.SensorEvaluationContext | None = None) -> StreamsCursor:
        def build(data: dict[str, Any]) -> StreamsCursor:
            streams = {str(k): dict(v) for k, v in data.get("streams", {}).items()}
            for state in streams.values():
                ConfigurationWindow.from_json(state.get("window"))  # must load
            return cls(streams=streams, resume_at=str(data.get("resume_at", "")))

        return parse_cursor(raw, CURSOR_VERSION, build, cls, context, "reading every stream's newest records")


def build_streams_sensor(
    *,
    scaling: ScalingAssets,
    traces: TraceAssets | None = None,
    name: str | None = None,
    minimum_interval_seconds: int = 30,
    tick_budget_s: float = 40.0,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """The sensor over every stream of the ``streams`` resource's home (see module docstring).

    Args:
        scaling: what :func:`build_scaling_assets` built: its job is requested, its policy decides.
        traces: what :func:`build_trace_assets` built: with it, each stream's lag and throughput
            are observations of its ``stream`` asset, and each plan run comes with a run of the
            trace snapshot of the window in progress.
        name: sensor name (default: the translator's ``streams_sensor``).
        minimum_interval_seconds: seconds between ticks.
        tick_budget_s: streams left when a tick has run this long wait for the next tick (which
            starts with them).
        default_status: STOPPED by default; start it in the UI or with ``dagster sensor start``.
    """
    if traces is not None and type(traces.streams_def) is not type(scaling.partitions_def):
        raise ValueError("the trace and scaling assets must both name their streams or both use dynamic partitions")
    policy = POLICIES[scaling.policy_name](scaling.policy_config)
    keep = policy.config.window_batches + policy.config.warmup_batches + 2
    partitions = scaling.partitions_def
    jobs = [scaling.job] if traces is None else [scaling.job, traces.job]

    @dg.sensor(
        name=name or scaling.translator.name("streams_sensor"),
        jobs=jobs,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Every stream: registers it, records its lag and throughput, and requests "
        f"{scaling.job.name} when the {policy.name} policy's guards say it left its band "
        "(the run plans from its traces).",
    )
    def _sensor(
        context: dg.SensorEvaluationContext, streams: StreamRuntimeResource, audit_ledger: AuditLedgerResource
    ) -> dg.SensorResult:
        started = time.monotonic()
        cursor = StreamsCursor.parse(context.cursor, context)
        rows = {row["name"]: row for row in streams.supervisor().list()}
        registration: list[dg.AddDynamicPartitionsRequest] = []
        if isinstance(partitions, dg.DynamicPartitionsDefinition):
            known = set(context.instance.get_dynamic_partitions(partitions.name))
            new = sorted(set(rows) - known)
            if new:
                registration.append(
                    dg.AddDynamicPartitionsRequest(partitions_def_name=partitions.name, partition_keys=new)
                )
                context.log.info(f"registering streams {new} as partitions of {partitions.name!r}")
            names = sorted(rows)
        else:
            names = list(partitions.get_partition_keys())
        if cursor.resume_at in names:  # the streams the last tick's budget left out go first
            at = names.index(cursor.resume_at)
            names = names[at:] + names[:at]
        busy = {
            run.tags.get(STREAM_TAG)
            for run in context.instance.get_runs(
                dg.RunsFilter(job_name=scaling.job.name, statuses=IN_FLIGHT), limit=1000
            )
        }
        ledger = audit_ledger.ledger()
        requests: list[dg.RunRequest] = []
        events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
        reasons: list[str] = []
        ran_at: list[float] = []  # when the streams ran, as far as this tick saw: the trace windows to register
        next_cursor = StreamsCursor(streams={k: v for k, v in cursor.streams.items() if k in rows})
        for index, stream in enumerate(names):
            if time.monotonic() - started > tick_budget_s:
                next_cursor.resume_at = stream
                reasons.append(
                    f"{', '.join(names[index:])}: not reached within the tick's {tick_budget_s:g} s; first next tick"
                )
                break
            row = rows.get(stream)
            if row is None:
                reasons.append(f"{stream}: not in the runtime home {streams.home_path}")
                continue
            state = next_cursor.streams.setdefault(stream, {})
            read = _read_stream(streams, stream, row, state)
            death = streams.supervisor().driver_death(stream) if row["driver"] == "died" else None
            incidents = query_failures(stream, read.records if read else []) + driver_died(stream, death)
            reasons.extend(_record(ledger, incidents))
            now = time.time()
            tick = stream_tick(stream, policy, state, read, keep=keep, now=now)
            ran_at.extend(window_times(read.records if read else [], tick.window, now))
            if traces is not None:
                events.extend(
                    page_events(
                        traces.stream.key,
                        stream,
                        row,
                        tick.window,
                        tick.decision,
                        policy,
                        state.setdefault("page", {}),
                        new_batches=tick.new_batches,
                        records=read.records if read else [],
                        query_error=next((i.error for i in incidents if i.kind == "query_failed"), None),
                    )
                )
            reason, direction = tick.reason, tick.direction
            if direction is None:
                reasons.append(f"{stream}: {reason}")
                continue
            run_key = f"{stream}|{tick.epoch}|{direction}"
            if stream in busy:
                reasons.append(f"{stream}: {reason}; a run of {scaling.job.name} for it is in flight")
            elif (lock := ledger.lock(stream)) is not None:
                reasons.append(f"{stream}: {reason}; {held_by(lock)}")
            elif state.get("requested") == run_key:
                reasons.append(f"{stream}: {reason}; already requested for this configuration ({run_key})")
            else:
                state["requested"] = run_key
                context.log.info(f"{stream}: {reason}: requesting {scaling.job.name} ({run_key})")
                tags = {STREAM_TAG: stream, DIRECTION_TAG: direction}
                ran_at.append(now)  # the evidence's window: registered with the request
                requests.extend(
                    [
                        *evidence_request(traces, stream, run_key, tags, now),
                        dg.RunRequest(run_key=run_key, job_name=scaling.job.name, partition_key=stream, tags=tags),
                    ]
                )
        if traces is not None:
            new_windows = traces.windows.registration(context.instance, ran_at)
            registration.extend(traces.windows.request(new_windows))
            if new_windows:
                context.log.info(f"registering trace windows {new_windows} as partitions of {traces.windows.name!r}")
        for line in reasons:
            context.log.info(line)
        result: dict[str, Any] = {
            "asset_events": events,
            "cursor": next_cursor.serialize(),
            "dynamic_partitions_requests": registration,
        }
        if requests:
            return dg.SensorResult(run_requests=requests, **result)
        return dg.SensorResult(
            skip_reason=dg.SkipReason("; ".join(reasons) or "no streams in the runtime home"), **result
        )

    return _sensor


def _record(ledger: AuditLedger, incidents: list[Incident]) -> list[str]:
    """Put a stream's incidents on the audit record; a line for each added (or why they could not be)."""
    if not incidents:
        return []
    try:
        added = record_incidents(ledger, incidents)
    except LedgerError as exc:
        return [f"{incidents[0].stream}: {len(incidents)} incident(s) not recorded: {exc}"]
    return [f"{r.stream}: {r.kind} ({r.payload['error']}), recorded in the audit ledger as #{r.seq}" for r in added]


@dataclass(frozen=True)
class StreamRead:
    """What a tick read of one running (or attached) stream: its new metrics records, the offset after them, whether
    the read started over (first seen, or the store was cut below the cursor), and how to ask its driver for its spec
    (called only where the metrics no longer reach its start)."""

    attached: bool
    records: list[dict[str, Any]]
    offset: int
    started_over: bool = False
    status_spec: Callable[[], dict[str, Any] | None] = lambda: None


@dataclass(frozen=True)
class StreamDirection:
    """Which way one stream points this tick: ``direction`` (scale_up, scale_down) with the configuration's ``epoch``,
    or None with the ``reason``; the ``window`` and ``decision`` it was judged on (None: no driver), and whether the
    tick read a new batch (its figures are then observed)."""

    reason: str
    direction: str | None = None
    epoch: str = ""
    window: ConfigurationWindow | None = None
    decision: Decision | None = None
    new_batches: bool = False


def stream_tick(
    stream: str, policy: ScalingPolicy, state: dict[str, Any], read: StreamRead | None, *, keep: int, now: float
) -> StreamDirection:
    """One stream's part of a tick, without Dagster: fold ``read`` into the configuration window kept in ``state``
    (this stream's cursor entry, updated in place) and ask the policy for a direction, no traces read. ``read`` None:
    the stream has no driver (its window is dropped: a restarted driver starts a new configuration anyway)."""
    if read is None:
        state.pop("window", None)
        return StreamDirection("not running (no driver)")
    if read.started_over:
        state.pop("window", None)
    state["offset"] = read.offset
    window = ConfigurationWindow.from_json(state.get("window")).update(read.records, keep=keep)
    if window.spec is None and not read.attached:  # started longer ago than the first read reaches
        window = ConfigurationWindow(spec=read.status_spec(), epoch="before-recent-metrics").update([], keep=keep)
    window.previous = None  # only the run's DS2 fit reads it: the cursor stays small with many streams
    state["window"] = window.to_json()
    decision = decide(policy, window, now, plan=False)
    if read.attached and window.terminated:
        decision = replace(decision, reason=decision.reason + next_run_advice(stream))
    new_batches = any(r.get("kind") == "progress" for r in read.records)
    judged = {"window": window, "decision": decision, "new_batches": new_batches}
    if decision.action not in ("scale_up", "scale_down"):
        return StreamDirection(decision.reason, **judged)
    return StreamDirection(decision.reason, decision.action, window.epoch, **judged)


def _read_stream(
    streams: StreamRuntimeResource, stream: str, row: dict[str, Any], state: dict[str, Any]
) -> StreamRead | None:
    """Read one stream's new metrics records from the cursor in ``state`` (None: it has no driver)."""
    attached = row["driver"] == "attached"
    if not attached and row["driver"] != "running":
        return None
    if attached:
        streams.refresh(stream)  # only what is new in its event logs
    store = streams.metrics(stream)
    offset = state.get("offset")
    started_over = offset is None or offset > store.size()
    if started_over:
        offset = store.tail_offset(FIRST_READ_BYTES)
    records, offset = store.read(offset)
    return StreamRead(attached, records, offset, started_over, lambda: streams.status(stream).get("spec"))
