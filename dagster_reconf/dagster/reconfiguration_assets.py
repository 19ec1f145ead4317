"""The reconfiguration as Dagster ops, and ``stream_configuration`` as the graph-backed asset they materialize.

``stream_configuration`` (partitioned by stream, downstream of ``ds2_plans``) is the
graph preflight -> prepare -> pause -> migrate -> verify -> resume -> observe -> record,
one op per step of :mod:`dagster_reconf.core.reconfig.reconfigurer`, so the UI shows
the lineage plan -> reconfiguration and every step's log and duration. The ops pass
the reconfiguration's id along; its journal in the audit ledger is the state, so
re-executing a failed run from the failed op continues where it stopped (each step is
idempotent and a step already journaled as ended is not run again). The pause op runs
the steps of the stopped stream back to back (``PAUSED_STEPS``: pause through resume),
since Dagster's hand-off between ops (about 0.15 s each, measured) would add to the
stream's downtime; the migrate, verify and resume ops then find their step journaled
and log its result.

What gets applied: a plan given in the run config (``plan``, a typed
:class:`~dagster_reconf.dagster.run_config.ExecutionPlanConfig`, from the launchpad or a script),
else the ``ds2_plans`` decision. A ``hold`` decision, or recommend-only mode, applies
nothing and says so. The materialization's metadata carries the outcome, the actions,
per-step timings, the verification table, the observed downtime and catch-up, and the
ledger record (reconfiguration id, head hash, and the command that shows it).

One run at a time per stream: the run's ops hold the stream's lease under the run's name (its root run, so a
re-execution takes it over) between them, and a run whose preflight finds another run of the stream still in flight
applies nothing.

:func:`build_reconfiguration_failure_sensor` records failed reconfiguration runs in the
ledger too, with the run's error.
"""

import warnings
from typing import Any

import dagster as dg
import pandas as pd

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.ledger import AuditLedger
from dagster_reconf.core.reconfig import (
    PAUSED_STEPS,
    STRATEGIES,
    ExecutionPlan,
    Reconfiguration,
    ReconfigurationInterrupted,
    ReconfigurationRefused,
    Reconfigurer,
)
from dagster_reconf.core.scaling.scaling_plan import ScalingPlan
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.dagster.constants import IN_FLIGHT, RECONFIGURATION_TAG, STREAM_TAG
from dagster_reconf.dagster.metadata_tables import figures_table, frame_table, round_figure, settings_table
from dagster_reconf.dagster.resources import AuditLedgerResource, StreamRuntimeResource
from dagster_reconf.dagster.run_config import ExecutionPlanConfig, ReconfigureConfig, Strategy
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator, asset_arguments

__all__ = ["build_reconfiguration_failure_sensor", "build_state_verified_check", "build_stream_configuration"]

STATE_VERIFIED = "state_verified"
POOL = "dagster_reconf_reconfiguration"
RUN_HOLDER = "dagster run "  # how a lock's holder and its lease's owner name a Dagster run
ROOT_RUN_TAG = "dagster/root_run_id"  # what Dagster tags a re-execution with
_ROLLED_BACK = (("verify", "observe", "record"), "the stream was rolled back")
# outcome -> the steps whose op fails the run with it, and what was undone
FAILED_AT = {
    "failed_before_pause": (("preflight", "prepare"), "nothing was stopped or changed"),
    "rolled_back": _ROLLED_BACK,
    "failed_after_resume": _ROLLED_BACK,
}


def target_plan(spec: StreamSpec, ds2_plans: dict[str, Any], given: ExecutionPlanConfig | None) -> ExecutionPlan | None:
    """The plan to apply: the one given in run config, else the DS2 decision as an execution plan (None: nothing to
    apply)."""
    if given is not None:
        return given.to_plan(spec.name)
    if not ds2_plans.get("plan"):
        return None
    scaling = ScalingPlan.parse(ds2_plans["plan"])
    return ExecutionPlan.of(spec.with_changes(scaling.target.changes_for(spec)))


def _run_owner(context: dg.OpExecutionContext) -> str:
    """The lease owner of a run's ops: its root run, so a re-execution of a failed run takes its lease at once."""
    return f"{RUN_HOLDER}{context.run.root_run_id or context.run_id}"


def _reconfigurer(
    context: dg.OpExecutionContext,
    streams: StreamRuntimeResource,
    ledger: AuditLedger,
    strategy: str,
    observe_timeout_s: float,
) -> Reconfigurer:
    return Reconfigurer(
        streams.handle(context.partition_key),
        ledger,
        strategy=strategy,
        holder=f"{RUN_HOLDER}{context.run_id}",
        observe_timeout_s=observe_timeout_s,
        handover=streams.handover,
        lease_owner=_run_owner(context),  # kept between this run's ops: no other run slips in between them
    )


def _other_run_in_flight(context: dg.OpExecutionContext, ledger: AuditLedger) -> str | None:
    """The id of another Dagster run, queued or running, that holds the stream's reconfiguration (None: none).

    The lease covers the hand-off between one run's ops for :data:`~dagster_reconf.core.ledger.locks.LEASE_S`; a
    slower hand-off (a busy executor) must not let a second run of the same plan continue the reconfiguration beside
    the first."""
    lock = ledger.lock(context.partition_key)
    if lock is None:
        return None
    mine = {context.run_id, context.run.root_run_id or context.run_id}
    roots = {text.removeprefix(RUN_HOLDER) for text in (lock.holder, lock.owner or "") if text.startswith(RUN_HOLDER)}
    for root in roots - mine:
        runs = [context.instance.get_run_by_id(root)]
        runs += context.instance.get_runs(dg.RunsFilter(tags={ROOT_RUN_TAG: root}, statuses=IN_FLIGHT), limit=5)
        for run in runs:
            if run is not None and run.status in IN_FLIGHT and run.run_id not in mine:
                return run.run_id
    return None


def _run_step(
    context: dg.OpExecutionContext, reconfigurer: Reconfigurer, reconfiguration: Reconfiguration, step: str
) -> dict[str, Any]:
    done = step in reconfiguration.results  # by an earlier op of this run (the pause op's), or before a re-execution
    context.log.info(
        f"{reconfiguration.stream}: {step}{' already done' if done else ''} (reconfiguration {reconfiguration.id})"
    )
    try:
        result = reconfigurer.step(reconfiguration, step)
    except ReconfigurationRefused as exc:
        raise dg.Failure(
            description=str(exc), metadata={"problems": dg.MetadataValue.json(exc.problems)}, allow_retries=False
        ) from None
    except ReconfigurationInterrupted as exc:
        raise dg.Failure(
            description=f"{exc} In Dagster: re-execute this run from failure; "
            "the journal in the ledger says what is done.",
            metadata={"reconfiguration_id": reconfiguration.id},
        ) from exc
    steps, undone = FAILED_AT.get(reconfiguration.outcome or "", ((), ""))
    if step in steps:
        raise dg.Failure(
            description=f"{reconfiguration.stream}: {'; '.join(reconfiguration.explanation())}; {undone}, and it runs "
            "as before",
            metadata={step: dg.MetadataValue.json(result)},
            allow_retries=False,
        )
    context.log.info(f"{reconfiguration.stream}: {step} done in {reconfiguration.timings.get(step, 0.0):.2f} s")
    return result


def _reconfiguration_op(translator: ReconfTranslator, step: str, description: str) -> Any:
    """The decorator of one reconfiguration op: named by the translator, in the pool that runs one at a time."""
    return dg.op(name=translator.name(step), pool=POOL, description=description)


def _step_op(step: str, default_strategy: str, default_observe_s: float, translator: ReconfTranslator):
    steps = PAUSED_STEPS if step == PAUSED_STEPS[0] else (step,)
    description = (
        f"Reconfiguration steps {', '.join(steps)}, back to back while the stream is stopped"
        if len(steps) > 1
        else f"Reconfiguration step '{step}'"
    )

    @_reconfiguration_op(translator, step, f"{description} (journaled in the audit ledger).")
    def _op(
        context: dg.OpExecutionContext,
        reconfiguration_id: str,
        streams: StreamRuntimeResource,
        audit_ledger: AuditLedgerResource,
    ) -> str:
        if not reconfiguration_id:
            return ""
        ledger = audit_ledger.ledger()
        reconfiguration = Reconfiguration.from_ledger(ledger, reconfiguration_id)
        reconfigurer = _reconfigurer(context, streams, ledger, default_strategy, default_observe_s)
        for name in steps:
            _run_step(context, reconfigurer, reconfiguration, name)
        return reconfiguration_id

    return _op


def _rows_table(rows: list[dict[str, Any]]) -> dg.MetadataValue:
    return frame_table(pd.DataFrame(rows)) if rows else dg.MetadataValue.text("(none)")


def build_stream_configuration(
    *,
    partitions_def: dg.PartitionsDefinition,
    strategy: str = "native",
    observe_timeout_s: float = 60.0,
    group_name: str | None = None,
    translator: ReconfTranslator | None = None,
) -> dg.AssetsDefinition:
    """The graph-backed ``stream_configuration`` asset over ``ds2_plans`` (see module docstring).

    Needs resources ``streams`` (:class:`StreamRuntimeResource`) and ``audit_ledger``
    (:class:`AuditLedgerResource`).

    Args:
        partitions_def: the streams (the same partitions as ``ds2_plans``).
        strategy: how state moves by default: ``native``, ``replay`` or ``precopy``.
        observe_timeout_s: how long the observe step watches the stream catch up.
        group_name: asset group in the UI (default: the spec's, the translator's).
        translator: names the asset, its input and its ops (default: the plain names).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {list(STRATEGIES)}")
    strategy = Strategy(strategy).value
    translator = translator or ReconfTranslator()

    @_reconfiguration_op(translator, "preflight", "Decide what to apply; check everything before anything is touched.")
    def preflight(
        context: dg.OpExecutionContext,
        config: ReconfigureConfig,
        ds2_plans: dict,
        streams: StreamRuntimeResource,
        audit_ledger: AuditLedgerResource,
    ) -> str:
        stream = context.partition_key
        spec = streams.handle(stream).spec()
        try:
            target = target_plan(spec, ds2_plans, config.plan)
        except SpecError as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        recommend_only = config.recommend_only or bool(ds2_plans.get("recommend_only"))
        if target is None or recommend_only:
            why = (
                "recommend-only: the plan is recorded, not applied"
                if target
                else f"no plan: {ds2_plans.get('reason', '')}"
            )
            context.log.info(f"{stream}: {why}")
            context.add_output_metadata({"note": why})
            return ""
        ledger = audit_ledger.ledger()
        reconfigurer = _reconfigurer(
            context, streams, ledger, config.strategy.value if config.strategy else strategy, observe_timeout_s
        )
        tags = context.run.tags
        trigger = {
            "kind": "sensor" if "dagster/sensor_name" in tags else "manual",
            "run_id": context.run_id,
            "sensor": tags.get("dagster/sensor_name"),
            "user": tags.get("dagster/user"),
        }
        evidence = {k: ds2_plans.get(k) for k in ("reason",)}
        if ds2_plans.get("plan") and config.plan is None:
            evidence.update(
                scaling_plan=ds2_plans["plan"].get("reason"),
                predicted=ds2_plans["plan"].get("predicted"),
                report=ds2_plans["plan"].get("report"),
            )
        other = _other_run_in_flight(context, ledger)
        if other is not None:
            raise dg.Failure(
                description=f"stream {stream!r} is being reconfigured by Dagster run {other}, still in flight: this "
                "run applies nothing (a second run of a plan never runs steps beside the first); wait for it to end",
                allow_retries=False,
            )
        try:
            reconfiguration = reconfigurer.begin(target, trigger=trigger, evidence=evidence)
        except ReconfigurationRefused as exc:
            raise dg.Failure(
                description=str(exc), metadata={"problems": dg.MetadataValue.json(exc.problems)}, allow_retries=False
            ) from None
        context.instance.add_run_tags(context.run_id, {RECONFIGURATION_TAG: reconfiguration.id})
        if reconfiguration.outcome == "noop":
            context.log.info(f"{stream}: the plan is already in force")
            return reconfiguration.id
        _run_step(context, reconfigurer, reconfiguration, "preflight")
        return reconfiguration.id

    prepare, pause, migrate, verify, resume, observe = (
        _step_op(step, strategy, observe_timeout_s, translator)
        for step in ("prepare", "pause", "migrate", "verify", "resume", "observe")
    )

    @_reconfiguration_op(translator, "record", "Write the reconfiguration's record; output the configuration in force.")
    def record(
        context: dg.OpExecutionContext,
        reconfiguration_id: str,
        streams: StreamRuntimeResource,
        audit_ledger: AuditLedgerResource,
    ):
        stream = context.partition_key
        handle = streams.handle(stream)
        if not reconfiguration_id:
            spec = handle.spec()
            return dg.Output(
                ExecutionPlan.of(spec).settings(),
                metadata={
                    "applied": False,
                    "note": "nothing applied",
                    "plan": settings_table(ExecutionPlan.of(spec).model_dump()),
                },
            )
        ledger = audit_ledger.ledger()
        reconfiguration = Reconfiguration.from_ledger(ledger, reconfiguration_id)
        if not reconfiguration.finished:
            _run_step(
                context, _reconfigurer(context, streams, ledger, strategy, observe_timeout_s), reconfiguration, "record"
            )
        in_force = ExecutionPlan.of(handle.spec())
        return dg.Output(in_force.settings(), metadata=_record_metadata(reconfiguration, in_force, ledger))

    spec = translator.get_asset_spec(AssetKind.STREAM_CONFIGURATION)

    @dg.graph_asset(
        **asset_arguments(
            spec,
            graph=True,
            group_name=group_name,
            partitions_def=partitions_def,
            ins={"ds2_plans": dg.AssetIn(translator.asset_key(AssetKind.DS2_PLANS))},
        )
    )
    def stream_configuration(ds2_plans):
        return record(observe(resume(verify(migrate(pause(prepare(preflight(ds2_plans))))))))

    return stream_configuration


def build_state_verified_check(key: dg.AssetKey, partitions_def: dg.PartitionsDefinition) -> dg.AssetChecksDefinition:
    """``state_verified`` on ``stream_configuration``: the state the run's reconfiguration moved matches the state
    before it, store by store (rows and checksums). It runs after each materialization, in the same run; a run that
    moved no state passes and says so."""
    with warnings.catch_warnings():  # partitioned checks are a preview in Dagster 1.12-1.13
        warnings.simplefilter("ignore", dg.PreviewWarning)

        @dg.asset_check(
            asset=key,
            name=STATE_VERIFIED,
            partitions_def=partitions_def,
            description="The state a reconfiguration moved equals the state before it, store by store.",
        )
        def state_verified(
            context: dg.AssetCheckExecutionContext, audit_ledger: AuditLedgerResource
        ) -> dg.AssetCheckResult:
            run = context.instance.get_run_by_id(context.run.run_id)  # tags added in the run: read them afresh
            reconfiguration_id = run.tags.get(RECONFIGURATION_TAG) if run else None
            if not reconfiguration_id:
                return dg.AssetCheckResult(passed=True, description="nothing applied in this run: no state moved")
            reconfiguration = Reconfiguration.from_ledger(audit_ledger.ledger(), reconfiguration_id)
            if "verify" not in reconfiguration.results:
                return dg.AssetCheckResult(
                    passed=reconfiguration.outcome in ("noop", "succeeded"),
                    description=f"reconfiguration {reconfiguration_id} ({reconfiguration.outcome}) did not verify",
                )
            verification = reconfiguration.verification
            if verification.skipped:
                return dg.AssetCheckResult(passed=True, description=f"no state moved: {verification.skipped}")
            return dg.AssetCheckResult(
                passed=verification.ok,
                description="the moved state matches, store by store"
                if verification.ok
                else "; ".join(verification.problems) or "the moved state does not match (rolled back)",
                metadata={"stores": _rows_table(verification.stores), "state_rows": verification.state_rows},
            )

    return state_verified


def _record_metadata(reconfiguration: Reconfiguration, in_force: ExecutionPlan, ledger: AuditLedger) -> dict[str, Any]:
    applied = reconfiguration.outcome == "succeeded"
    metadata: dict[str, Any] = {
        "applied": applied,
        "outcome": reconfiguration.outcome or "in progress",
        "note": "; ".join(
            ["applied" if applied else f"not applied: {reconfiguration.outcome}", *reconfiguration.explanation()]
        ),
        "reconfiguration_id": reconfiguration.id,
        "plan_hash": reconfiguration.plan_hash,
        "strategy": reconfiguration.strategy,
        "actions": _rows_table(reconfiguration.actions),
        "plan": settings_table(in_force.model_dump()),
        "step_seconds": figures_table(reconfiguration.timings, unit="s"),
        "ledger_head": ledger.head(),
        "audit": dg.MetadataValue.md(
            f"Ledger `{ledger.engine.url.render_as_string(hide_password=True)}`, "
            f"reconfiguration `{reconfiguration.id}`: `reconf audit show {reconfiguration.id}`; check the chain with "
            f"`reconf audit verify --expect-head {ledger.head()}`"
        ),
    }
    if "verify" in reconfiguration.results and reconfiguration.verification.stores:
        metadata["verification"] = _rows_table(reconfiguration.verification.stores)
        metadata["verified"] = reconfiguration.verification.ok
    if "observe" in reconfiguration.results:
        observation = reconfiguration.observation
        figures = {"downtime_s": observation.downtime_s, "pause_s": observation.pause_s}
        figures.update(catch_up_s=observation.catch_up_s, max_event_latency_s=observation.max_event_latency_s)
        metadata.update({key: round_figure(float(value)) for key, value in figures.items() if value is not None})
    return metadata


def build_reconfiguration_failure_sensor(
    *, job: Any, name: str | None = None, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING
) -> dg.SensorDefinition:
    """A run-failure sensor that records failed runs of ``job`` in the audit ledger (resource ``audit_ledger``).

    Its default name follows the job's (``reconfigure_stream_job`` -> ``reconfiguration_failure_sensor``, a
    translator's ``team_a_reconfigure_stream_job`` -> ``team_a_reconfiguration_failure_sensor``).
    """
    name = name or job.name.replace("reconfigure_stream_job", "reconfiguration_failure_sensor")
    if name == job.name:
        name = f"{job.name}_failure_sensor"

    @dg.run_failure_sensor(
        name=name,
        monitored_jobs=[job],
        default_status=default_status,
        description="Records failed reconfiguration runs in the audit ledger.",
    )
    def _sensor(context: dg.RunFailureSensorContext, audit_ledger: AuditLedgerResource) -> None:
        run = context.dagster_run
        stream = run.tags.get("dagster/partition") or run.tags.get(STREAM_TAG) or "unknown"
        audit_ledger.ledger().append(
            stream=stream,
            kind="run.failed",
            reconfiguration_id=run.tags.get(RECONFIGURATION_TAG),
            payload={
                "run_id": run.run_id,
                "job": run.job_name,
                "error": context.failure_event.message,
                "tags": {k: v for k, v in run.tags.items() if k.startswith(("dagster-reconf/", "dagster/"))},
            },
        )

    return _sensor
