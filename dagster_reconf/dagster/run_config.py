"""Typed run config of the scaling and reconfiguration assets: what the launchpad shows field by field.

Plans travel through run config as nested :class:`dagster.Config` classes that mirror the
core's pydantic models (:class:`~dagster_reconf.core.scaling.scaling_plan.ScalingPlan`,
:class:`~dagster_reconf.core.reconfig.ExecutionPlan`), never as JSON strings, and the
migration strategy is an enum. Dagster checks types and enum values before a run
starts; the core's models then check ranges and cross-field rules, with messages that
name the field (:class:`~dagster_reconf.core.errors.SpecError`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional

import dagster as dg
from pydantic import Field

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.reconfig import ExecutionPlan
from dagster_reconf.core.scaling.scaling_plan import ScalingPlan
from dagster_reconf.core.spec import STRATEGIES
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator

# Optional[...] rather than X | None: Dagster's config schema reads these annotations.
__all__ = [
    "ExecutionPlanConfig",
    "KnobsConfig",
    "OperatorScalingConfig",
    "PlanConfig",
    "ReconfigureConfig",
    "ScalingPlanConfig",
    "Strategy",
]

Strategy = Enum("Strategy", {name: name for name in STRATEGIES}, type=str)
Strategy.__doc__ = (
    "How a plan that changes the state partitions moves the state (see dagster_reconf.core.spark.state_migrator)."
)


class KnobsConfig(dg.Config):
    """The knobs that decide a stream's capacity (the core's ``Knobs``)."""

    cores: int = Field(description="Task slots: local[N] locally, spark.cores.max on a cluster.")
    source_partitions: Optional[int] = Field(
        None, description="Partitions the source splits a batch into (null: no such knob)."
    )
    state_partitions: int = Field(description="Shuffle/state partitions.")
    trigger_interval_s: float = Field(description="Processing-time trigger interval in seconds.")
    max_per_trigger: Optional[int] = Field(None, description="Cap per batch in the source's own unit (null: no cap).")


class OperatorScalingConfig(dg.Config):
    """One operator's row of a plan's scaling report (the core's ``OperatorScaling``); null: unknown or unbounded."""

    operator: str
    kind: str
    parallelism_now: int
    parallelism_planned: int
    ds2_parallelism: int
    target_records_per_s: Optional[float] = None
    true_processing_rate: Optional[float] = None
    selectivity: Optional[float] = None
    work_ms_per_event: Optional[float] = None
    cpu_ms_per_event: Optional[float] = None
    capacity_now_events_per_s: Optional[float] = Field(
        None, description="Events/s at the current knobs; null: no bound."
    )
    capacity_planned_events_per_s: Optional[float] = Field(
        None, description="Events/s at the target knobs; null: no bound."
    )
    skew: Optional[float] = None


class ScalingPlanConfig(dg.Config):
    """A scaling plan decided elsewhere (the scaling sensor, a person): knobs ``current`` -> ``target`` and the
    evidence."""

    stream: str = Field(description="The stream the plan is for (must be the run's partition).")
    policy: str = Field(description="The policy that made it: ds2, dhalion or dynalloc.")
    current: KnobsConfig
    target: KnobsConfig
    reason: str = Field(description="Why, in one line.")
    epoch: str = Field("", description="The configuration the plan starts from (when it was started).")
    report: list[OperatorScalingConfig] = Field(
        default_factory=list, description="Per operator: parallelism, capacity, target rate."
    )
    predicted: dict[str, float] = Field(default_factory=dict, description="What the model predicts for the target.")

    @classmethod
    def of(cls, plan: ScalingPlan) -> "ScalingPlanConfig":
        return cls(**plan.model_dump(mode="json"))

    def to_plan(self) -> ScalingPlan:
        """The core's plan (raises SpecError naming a bad field, e.g. a target equal to the current knobs)."""
        return ScalingPlan.parse(self.model_dump())


class PlanConfig(dg.Config):
    """Run config of ``ds2_plans``: record the plan given here instead of deciding afresh."""

    plan: Optional[ScalingPlanConfig] = Field(None, description="A plan decided elsewhere; empty: decide now.")


class ExecutionPlanConfig(dg.Config):
    """A whole execution plan (the core's ``ExecutionPlan``), flat: resources, partitioning and logic."""

    master: str = Field(description="Spark master URL: local[N], spark://HOST:PORT, k8s://..., yarn.")
    executor_cores: Optional[int] = Field(None, description="Cores per executor (cluster masters).")
    max_cores: Optional[int] = Field(None, description="spark.cores.max (cluster masters).")
    cores_ceiling: Optional[int] = Field(
        None, description="Standalone masters: max_cores up to this changes executors in the same SparkContext."
    )
    executor_memory: Optional[str] = Field(None, description="Executor memory, e.g. 2g.")
    state_partitions: Optional[int] = Field(None, description="State partitions of every stateful operator.")
    state_partitions_by_operator: Optional[dict[str, int]] = Field(
        None, description="Or per stateful operator id (Spark repartitions them together: one count for all)."
    )
    source_partitions: Optional[int] = Field(None, description="Partitions the source splits a batch into.")
    trigger_interval_s: float = Field(description="Processing-time trigger interval in seconds.")
    max_per_trigger: Optional[int] = Field(None, description="Cap per batch in the source's own unit.")
    code_version: str = Field("1", description="Version of the query's logic.")

    @classmethod
    def of(cls, plan: ExecutionPlan) -> "ExecutionPlanConfig":
        partitioning = plan.partitioning
        by_operator = partitioning.state_partitions if isinstance(partitioning.state_partitions, dict) else None
        return cls(
            **plan.resources.model_dump(),
            source_partitions=partitioning.source_partitions,
            state_partitions=None if by_operator else partitioning.state_partitions,
            state_partitions_by_operator=by_operator,
            trigger_interval_s=partitioning.trigger_interval_s,
            max_per_trigger=partitioning.max_per_trigger,
            code_version=plan.logic.code_version,
        )

    def to_plan(self, stream: str) -> ExecutionPlan:
        """The core's plan for ``stream`` (raises SpecError naming a bad field)."""
        if (self.state_partitions is None) == (self.state_partitions_by_operator is None):
            raise SpecError(
                "plan: give exactly one of state_partitions (one count) and state_partitions_by_operator "
                f"(per operator id); got {self.state_partitions!r} and {self.state_partitions_by_operator!r}"
            )
        return ExecutionPlan.parse(
            {
                "stream": stream,
                "resources": {
                    k: getattr(self, k)
                    for k in ("master", "executor_cores", "max_cores", "cores_ceiling", "executor_memory")
                },
                "partitioning": {
                    "state_partitions": self.state_partitions
                    if self.state_partitions is not None
                    else self.state_partitions_by_operator,
                    "source_partitions": self.source_partitions,
                    "trigger_interval_s": self.trigger_interval_s,
                    "max_per_trigger": self.max_per_trigger,
                },
                "logic": {"code_version": self.code_version},
            }
        )


class ReconfigureConfig(dg.Config):
    """Run config of the ``preflight`` op: what to apply, and how."""

    plan: Optional[ExecutionPlanConfig] = Field(
        None,
        description="An execution plan to apply instead of the ds2_plans decision (the stream is the run's partition).",
    )
    strategy: Optional[Strategy] = Field(
        None, description="How state moves: native, replay or precopy. Empty: the asset's default."
    )
    recommend_only: bool = Field(False, description="Validate and record the plan, but do not apply it.")

    def run_config(self, translator: ReconfTranslator | None = None) -> dict[str, Any]:
        """The run config that gives this to ``stream_configuration``'s preflight (scripts, tests, schedules)."""
        translator = translator or ReconfTranslator()
        config = self.model_dump(mode="json", exclude_none=True)
        return {
            "ops": {
                translator.node_name(AssetKind.STREAM_CONFIGURATION): {
                    "ops": {translator.name("preflight"): {"config": config}}
                }
            }
        }
