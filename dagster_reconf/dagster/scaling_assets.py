"""DS2 scaling plans and the stream configuration that applies them, as Dagster assets.

* ``ds2_plans`` (partitioned by stream): the policy's decision for the stream's current
  configuration, from its recent batches (metrics store) and their traces. A run
  requested by the scaling sensor carries the sensor's plan in its config
  (``plan``, typed: :class:`~dagster_reconf.dagster.run_config.PlanConfig`) and records exactly that plan; materialized
  by hand or on a schedule,
  the asset decides afresh. Metadata: the plan table, the scaling report and a plot of
  capacity against the target rate. Downstream of ``trace_snapshots`` and
  ``cp_summaries`` (every window of the same stream), so the lineage shows where the
  evidence comes from.
* ``stream_configuration``: the execution plan in force after the plan is carried out by
  the reconfiguration ops (:mod:`dagster_reconf.dagster.reconfiguration_assets`: state
  migration, verification, audit record). In recommend-only mode nothing is applied.

They need the resources ``streams`` (:class:`StreamRuntimeResource`) and
``audit_ledger`` (:class:`AuditLedgerResource`).
"""

import base64
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.scaling.policies import POLICIES
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.scaling_plan import ScalingPlan, ScalingStep
from dagster_reconf.core.scaling.stream_decision import decide_stream
from dagster_reconf.dagster.inline_plots import BarRow, inline_bars
from dagster_reconf.dagster.metadata_tables import figures_table, frame_table, round_figure
from dagster_reconf.dagster.reconfiguration_assets import build_state_verified_check, build_stream_configuration
from dagster_reconf.dagster.resources import StreamRuntimeResource
from dagster_reconf.dagster.run_config import PlanConfig, Strategy
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator, asset_arguments

__all__ = ["ScalingAssets", "build_scaling_assets"]

# ds2_plans' inline plot (the page shows it in place; "plot" is the full one behind a click)
CAPACITY_GLANCE = "capacity now (red) and planned (green) per operator, target rate dashed"


@dataclass(frozen=True)
class ScalingAssets:
    """What :func:`build_scaling_assets` builds, to pass to ``Definitions``."""

    plans: dg.AssetsDefinition
    configuration: dg.AssetsDefinition
    job: Any  # what define_asset_job returns
    partitions_def: dg.PartitionsDefinition  # the streams: static names or dynamic partitions
    policy_name: str
    policy_config: PolicyConfig
    translator: ReconfTranslator
    checks: list[dg.AssetChecksDefinition]  # state_verified on stream_configuration

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        """Both assets, for ``Definitions(assets=[*scaling.assets, ...], asset_checks=scaling.checks)``."""
        return [self.plans, self.configuration]

    @property
    def defs(self) -> dg.Definitions:
        """Both assets, their check and the reconfiguration job as ``Definitions``, to merge with
        ``dg.Definitions.merge``."""
        return dg.Definitions(assets=self.assets, asset_checks=self.checks, jobs=[self.job])


def _plan_metadata(
    plan: ScalingPlan | None, reason: str, observation: dict[str, float], step: ScalingStep | None
) -> dict[str, Any]:
    from dagster_reconf.core.scaling.plots import capacity_plot_png

    metadata: dict[str, Any] = {"decision": reason, "observation": figures_table(observation)}
    if step is not None:  # every decision, a hold too: its kind and the cores it reserves before and after
        metadata.update(
            {
                "step": step.kind,
                "cores_before": step.cores_before,
                "cores_after": step.cores_after,
                "core_seconds_per_hour_saved": round_figure(float(step.core_seconds_per_hour_saved)),
            }
        )
    if plan is None:
        return metadata
    changed = pd.DataFrame([{"knob": k, "now": str(a), "planned": str(b)} for k, (a, b) in plan.changed().items()])
    metadata.update(
        {
            "plan_hash": plan.plan_hash,
            "policy": plan.policy,
            "plan": frame_table(changed),
            "predicted": figures_table(plan.predicted),
        }
    )
    if plan.report:
        report = pd.DataFrame([row.model_dump() for row in plan.report])
        metadata["scaling_report"] = frame_table(report)
        target = float(plan.predicted.get("target_rate", 0.0))
        png = base64.b64encode(capacity_plot_png(report, target, f"{plan.stream}: {plan.reason[:70]}")).decode()
        metadata["plot"] = dg.MetadataValue.md(f"![capacity vs target](data:image/png;base64,{png})")
        glance = _capacity_glance(report, target)
        if glance is not None:
            metadata = {CAPACITY_GLANCE: glance, **metadata}
    return metadata


def _capacity_glance(report: pd.DataFrame, target: float) -> dg.MetadataValue | None:
    """The capacity plot's bars, small enough for the page to show in place (see inline_plots)."""
    now = report["capacity_now_events_per_s"].astype(float)
    planned = report["capacity_planned_events_per_s"].astype(float)
    finite = pd.concat([now, planned]).replace([np.inf, -np.inf], np.nan).dropna()
    # Past 2.5x the target a bar only says "far past it": drawn to the edge, so the target and the bottleneck stay
    # readable beside an operator with ample capacity.
    scale = 2.5 * target if target > 0 else 1.1 * max(finite.tolist() or [0.0])
    rows = [
        BarRow(str(op).split(":", 1)[-1], (a, b))
        # the bottleneck first, an operator of unknown capacity (NaN: nothing measured) last
        for op, a, b in sorted(zip(report["operator"], now, planned), key=lambda row: (np.isnan(row[1]), row[1]))
    ]
    colors = ("#c44e52", "#55a868")  # the full plot's
    marker = target if target > 0 else None  # no target rate known: no line
    return inline_bars("capacity now and planned per operator", rows, colors, scale=scale, marker=marker)


def build_scaling_assets(
    *,
    streams: Sequence[str] | None = None,
    policy: str = "ds2",
    policy_config: PolicyConfig | dict[str, Any] | None = None,
    group_name: str | None = None,
    strategy: Strategy | str = "native",
    observe_timeout_s: float = 60.0,
    translator: ReconfTranslator | None = None,
) -> ScalingAssets:
    """``ds2_plans`` and ``stream_configuration``, and the job over both.

    Args:
        streams: stream names (static partitions); None (default): dynamic partitions, registered
            by the streams sensor as streams appear in the runtime home.
        policy: ``ds2`` (default), or a baseline (``dhalion``, ``dynalloc``).
        policy_config: a :class:`PolicyConfig`, or its fields as a dict (validated here).
        group_name: asset group of the plans and the configuration in the UI (default: their specs', the
            translator's).
        strategy: how a plan that moves state migrates it: ``native``, ``replay`` or ``precopy``.
        observe_timeout_s: how long a reconfiguration watches the stream catch up.
        translator: names keys, the group and the job (default: the plain names).
    """
    translator = translator or ReconfTranslator()
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {sorted(POLICIES)}")
    settings = PolicyConfig.parse(policy_config)
    partitions = translator.stream_partitions(streams)
    with warnings.catch_warnings():  # beta in Dagster 1.13, and the documented way to depend on one dimension
        warnings.simplefilter("ignore", dg.BetaWarning)
        per_stream = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="stream")

    @dg.asset(
        **asset_arguments(
            translator.get_asset_spec(AssetKind.DS2_PLANS),
            group_name=group_name,
            partitions_def=partitions,
            deps=[
                dg.AssetDep(translator.asset_key(kind), partition_mapping=per_stream)
                for kind in (AssetKind.TRACE_SNAPSHOTS, AssetKind.CP_SUMMARIES)
            ],
        )
    )
    def ds2_plans(context: dg.AssetExecutionContext, config: PlanConfig, streams: StreamRuntimeResource):
        """The scaling decision for a stream: a DS2 plan (knobs a -> b, with the evidence) or why not to change."""
        stream = context.partition_key
        if config.plan is not None:
            try:
                plan = config.plan.to_plan()
            except SpecError as exc:
                raise dg.Failure(description=f"{stream}: {exc}", allow_retries=False) from None
            if plan.stream != stream:
                raise dg.Failure(
                    description=f"the plan in the run config is for stream {plan.stream!r} but this run "
                    f"materializes {stream!r}: run it for partition {plan.stream!r}",
                    allow_retries=False,
                )
            reason, observation, recommend_only = plan.reason, dict(plan.predicted), settings.recommend_only
            step = plan.step
        else:
            decided = decide_stream(streams.home_path, stream, POLICIES[policy](settings))
            decision = decided.decision
            plan, reason, observation = decision.plan, decision.reason, decision.signal.as_dict()
            step = decision.step
            recommend_only = decided.recommend_only  # attached, or advice for a next run: nothing to apply it to
        context.log.info(f"{stream}: {step.describe() + '; ' if step else ''}{reason}")
        value = {
            "plan": plan.model_dump() if plan else None,
            "reason": reason,
            "recommend_only": recommend_only,
            "step": step.as_dict() if step else None,
        }
        return dg.Output(value, metadata=_plan_metadata(plan, reason, observation, step))

    stream_configuration = build_stream_configuration(
        partitions_def=partitions,
        strategy=strategy,
        observe_timeout_s=observe_timeout_s,
        group_name=group_name,
        translator=translator,
    )

    # In process: one process per op would put process start-ups between pause and resume, i.e. into the downtime.
    job = dg.define_asset_job(
        translator.name("reconfigure_stream_job"),
        selection=[ds2_plans, stream_configuration],
        executor_def=dg.in_process_executor,
        description="Decide a scaling plan for a stream and apply it.",
    )
    checks = [build_state_verified_check(stream_configuration.key, partitions)]
    return ScalingAssets(ds2_plans, stream_configuration, job, partitions, policy, settings, translator, checks)
