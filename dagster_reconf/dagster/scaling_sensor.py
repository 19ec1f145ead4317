"""The scaling sensor: watch a stream's metrics, and turn a policy decision into a run.

Each tick reads what the stream's driver appended to its metrics store since the last
tick (a byte cursor), folds it into the configuration window kept in the cursor, and
asks the policy (:mod:`dagster_reconf.core.scaling.policy`). It records the
observation on ``ds2_plans`` every tick. When the policy decides to scale, it requests
``reconfigure_stream_job`` for the stream with the plan in the run config and
``run_key`` = the plan's hash, so a plan is never applied twice (the cursor remembers
it too); given the trace assets, it also requests the snapshot and CP summary of the
window in progress, the evidence the plan was made from. Every tick that requests
nothing says why.

Contract: bounded work per tick (new metrics only; traces are read only when a
decision needs them), a versioned JSON cursor (an undecodable one logs a warning and
starts from the recent end of the store), no run while one for the stream is in flight
or an unfinished reconfiguration holds its lock in the audit ledger.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pandas as pd

from dagster_reconf.core.ledger.ledger import StreamLock
from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide, ingest_and_read
from dagster_reconf.core.scaling.policies import POLICIES
from dagster_reconf.core.scaling.policy import Decision, ScalingPolicy
from dagster_reconf.core.scaling.scaling_plan import ScalingPlan
from dagster_reconf.core.scaling.stream_decision import RECENT_METRICS_BYTES
from dagster_reconf.dagster.constants import IN_FLIGHT, PLAN_TAG, STREAM_TAG
from dagster_reconf.dagster.cursors import parse_cursor
from dagster_reconf.dagster.resources import AuditLedgerResource, StreamRuntimeResource
from dagster_reconf.dagster.run_config import ScalingPlanConfig
from dagster_reconf.dagster.scaling_assets import ScalingAssets
from dagster_reconf.dagster.stream_page import page_events
from dagster_reconf.dagster.trace_assets import STREAM_DIMENSION, WINDOW_DIMENSION, TraceAssets
from dagster_reconf.dagster.trace_windows import batch_times
from dagster_reconf.dagster.translator import AssetKind

__all__ = ["ScalingCursor", "ScalingTick", "StreamFacts", "build_scaling_sensor", "next_run_advice", "scaling_tick"]

CURSOR_VERSION = 1
MAX_EVENTS_PER_TICK = 1_000_000  # event-log events ingested per tick (about 7 s at most); the rest next tick


@dataclass
class ScalingCursor:
    """Where the sensor stopped reading, the configuration window, and the last plan it requested."""

    offset: int | None = None  # None: start from the recent end of the store
    window: dict[str, Any] = field(default_factory=dict)
    requested: str = ""  # hash of the last plan requested
    page: dict[str, Any] = field(default_factory=dict)  # what the stream's page last showed (see stream_page)

    def serialize(self) -> str:
        return json.dumps(
            {
                "version": CURSOR_VERSION,
                "offset": self.offset,
                "window": self.window,
                "requested": self.requested,
                "page": self.page,
            }
        )

    @classmethod
    def parse(cls, raw: str | None, context: dg.SensorEvaluationContext | None = None) -> "ScalingCursor":
        def build(data: dict[str, Any]) -> ScalingCursor:
            ConfigurationWindow.from_json(data.get("window"))  # must load
            return cls(
                offset=data.get("offset"),
                window=data.get("window") or {},
                requested=data.get("requested", ""),
                page=dict(data.get("page") or {}),
            )

        return parse_cursor(raw, CURSOR_VERSION, build, cls, context, "starting from the recent metrics")


def evidence_request(
    traces: TraceAssets | None, stream: str, run_key: str, tags: dict[str, str], now: float
) -> list[dg.RunRequest]:
    """The trace snapshot of ``stream``'s window in progress at ``now`` (what a plan run decides from), next to it in
    the UI; the sensor registers that window (:func:`window_times`)."""
    if traces is None:
        return []
    return [
        dg.RunRequest(
            run_key=f"{run_key}|traces",
            job_name=traces.job.name,
            tags=tags,
            partition_key=dg.MultiPartitionKey({STREAM_DIMENSION: stream, WINDOW_DIMENSION: traces.windows.key(now)}),
        )
    ]


def window_times(records: list[dict[str, Any]], window: ConfigurationWindow | None, now: float) -> list[float]:
    """When a stream ran, as far as one tick saw: its new batches' times, and ``now`` while its query runs
    (``window``: its configuration window, None without a driver; the window in progress is a partition from the
    stream's first tick in it)."""
    live = window is not None and not window.terminated
    return [*batch_times(records), *([now] if live else [])]


def held_by(lock: StreamLock) -> str:
    """Why no run is requested while an unfinished reconfiguration holds the stream's lock, and the way out."""
    return (
        f"reconfiguration {lock.reconfiguration_id} (plan {lock.plan_hash}) holds the stream with no run in flight: "
        f"re-execute its failed run to finish it, or `reconf reconfigure abort {lock.stream}`"
    )


@dataclass(frozen=True)
class StreamFacts:
    """What a tick knows of a stream besides its metrics: how it runs, and what holds it now."""

    attached: bool  # observed from its event logs only: plans are recommended, never applied
    running: bool  # a driver is recorded (an attached stream counts as running)
    run_in_flight: str | None = None  # the id of a reconfiguration run queued or running for it
    lock: StreamLock | None = None  # an unfinished reconfiguration's hold on it in the audit ledger


@dataclass
class ScalingTick:
    """What one tick decided: the next cursor, the policy's decision (None where it was not asked), the plan to
    request (None: no run), and why, in one line."""

    cursor: ScalingCursor
    reason: str
    decision: Decision | None = None
    plan: ScalingPlan | None = None


def scaling_tick(
    stream: str,
    policy: ScalingPolicy,
    cursor: ScalingCursor,
    records: list[dict[str, Any]],
    offset: int,
    facts: StreamFacts,
    activities: Callable[[], Callable[[float, float], pd.DataFrame] | None],
    now: float,
) -> ScalingTick:
    """One tick of the scaling sensor, without Dagster: fold the new metrics ``records`` (read up to ``offset``) into
    the cursor's window, and decide whether to request a plan run. ``activities`` ingests the stream's traces and
    returns their reader; it is called only once nothing holds the stream."""
    window = ConfigurationWindow.from_json(cursor.window).update(records)
    nxt = ScalingCursor(offset=offset, window=window.to_json(), requested=cursor.requested, page=cursor.page)
    if not facts.running:
        return ScalingTick(nxt, "not running (no driver)")
    if facts.run_in_flight is not None:
        return ScalingTick(nxt, f"reconfiguration run {facts.run_in_flight} is in flight")
    if facts.lock is not None:  # its run failed or was killed: a new plan would only be refused
        return ScalingTick(nxt, held_by(facts.lock))
    if facts.attached and window.terminated:  # held without traces; the advice for its next run is on ds2_plans
        ended = decide(policy, window, now)
        return ScalingTick(nxt, ended.reason + next_run_advice(stream), ended)
    decision = decide(policy, window, now, activities())
    plan = decision.plan
    if facts.attached and plan is not None:
        return ScalingTick(nxt, decision.reason + " (attached: recommended on ds2_plans, never applied here)", decision)
    if not decision.requests_run or plan is None:
        suffix = " (recommend-only: no run)" if decision.recommend_only and plan else ""
        return ScalingTick(nxt, decision.reason + suffix, decision)
    if plan.plan_hash == cursor.requested:
        return ScalingTick(nxt, f"plan {plan.plan_hash} was already requested", decision)
    nxt.requested = plan.plan_hash
    return ScalingTick(nxt, f"requesting plan {plan.plan_hash}: {plan.reason}", decision, plan)


def next_run_advice(stream: str) -> str:
    """Where an attached stream whose query ended finds the advice for its next run (said after the hold's reason)."""
    return f"; the advice for its next run is on ds2_plans (materialize its partition) or `reconf plan {stream}`"


def build_scaling_sensor(
    *,
    stream: str,
    scaling: ScalingAssets,
    traces: TraceAssets | None = None,
    name: str | None = None,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor that requests ``scaling.job`` for ``stream`` when its policy decides to scale.

    Args:
        stream: managed stream name (a partition of ``scaling``).
        scaling: what :func:`build_scaling_assets` built (job, policy and its settings).
        traces: what :func:`build_trace_assets` built: with it, each plan run comes with a
            run of ``traces.job`` for the stream's window in progress.
        name: sensor name (default ``<stream>_scaling_sensor``, ``-`` as ``_``, under the scaling assets' translator).
        minimum_interval_seconds: seconds between ticks.
        default_status: STOPPED by default; start it in the UI or with ``dagster sensor start``.
    """
    for what, partitions in (("scaling", scaling.partitions_def), ("trace", traces.streams_def if traces else None)):
        if isinstance(partitions, dg.StaticPartitionsDefinition) and stream not in partitions.get_partition_keys():
            raise ValueError(
                f"stream {stream!r} is not one of the {what} assets' streams {partitions.get_partition_keys()}"
            )
    policy = POLICIES[scaling.policy_name](scaling.policy_config)
    key = scaling.plans.key

    @dg.sensor(
        name=name or scaling.translator.name(f"{stream.replace('-', '_')}_scaling_sensor"),
        jobs=[scaling.job] if traces is None else [scaling.job, traces.job],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Requests a reconfiguration of {stream!r} when the {policy.name} policy decides to scale.",
    )
    def _sensor(
        context: dg.SensorEvaluationContext, streams: StreamRuntimeResource, audit_ledger: AuditLedgerResource
    ) -> dg.SensorResult:
        cursor = ScalingCursor.parse(context.cursor, context)
        attached = streams.attached(stream)
        if attached:
            streams.refresh(stream)  # its progress comes from its event logs: only what is new is read
        store = streams.metrics(stream)
        offset = (
            cursor.offset
            if cursor.offset is not None and cursor.offset <= store.size()
            else store.tail_offset(RECENT_METRICS_BYTES)
        )
        records, offset = store.read(offset)
        row = streams.supervisor().row(stream) or {"driver": "not running"}
        running = row["driver"] in ("running", "attached")
        busy = running and context.instance.get_runs(
            dg.RunsFilter(job_name=scaling.job.name, tags={STREAM_TAG: stream}, statuses=IN_FLIGHT), limit=1
        )
        facts = StreamFacts(
            attached=attached,
            running=running,
            run_in_flight=busy[0].run_id if busy else None,
            lock=audit_ledger.ledger().lock(stream) if running and not busy else None,
        )
        now = time.time()
        tick = scaling_tick(
            stream,
            policy,
            cursor,
            records,
            offset,
            facts,
            lambda: ingest_and_read(
                streams.trace_store(stream),
                streams.event_log_dir(stream),
                max_events=MAX_EVENTS_PER_TICK,
                query_ids=streams.query_ids(stream),
            ),
            now,
        )
        events = []
        windows: list[dg.AddDynamicPartitionsRequest] = []
        if traces is not None:
            window = ConfigurationWindow.from_json(tick.cursor.window) if running else None
            evidence = [now] if tick.plan is not None else []  # the window of the snapshot requested with the plan
            ran_at = window_times(records, window, now) + evidence
            windows = traces.windows.request(traces.windows.registration(context.instance, ran_at))
        if tick.decision is not None:
            figures = {k: round(v, 3) for k, v in tick.decision.signal.as_dict().items()}
            decision = tick.decision
            metadata = {**figures, "decision": decision.action, "reason": decision.reason, "judged": decision.judged}
            events.append(dg.AssetObservation(asset_key=key, partition=stream, metadata=metadata))
        if traces is not None:
            judged = tick.decision  # not asked while a run holds the stream: the page still judges its lag
            if judged is None and window is not None:
                judged = decide(policy, window, now, plan=False)
            events += page_events(
                traces.stream.key,
                stream,
                row,
                window,
                judged,
                policy,
                tick.cursor.page,
                new_batches=any(r.get("kind") == "progress" for r in records),
                records=records,
            )
        if tick.plan is None:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(f"{stream}: {tick.reason}"),
                asset_events=events,
                cursor=tick.cursor.serialize(),
                dynamic_partitions_requests=windows,
            )
        plan = tick.plan
        context.log.info(f"{stream}: {tick.reason}")
        return dg.SensorResult(
            run_requests=[
                *evidence_request(traces, stream, plan.plan_hash, {PLAN_TAG: plan.plan_hash}, now),
                dg.RunRequest(
                    run_key=plan.plan_hash,
                    job_name=scaling.job.name,
                    partition_key=stream,
                    run_config={
                        "ops": {
                            scaling.translator.node_name(AssetKind.DS2_PLANS): {
                                "config": {"plan": ScalingPlanConfig.of(plan).model_dump(mode="json")}
                            }
                        }
                    },
                    tags={STREAM_TAG: stream, PLAN_TAG: plan.plan_hash},
                ),
            ],
            asset_events=events,
            cursor=tick.cursor.serialize(),
            dynamic_partitions_requests=windows,
        )

    return _sensor
