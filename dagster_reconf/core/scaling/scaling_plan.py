"""The parallelism knobs of a stream, and a scaling plan that changes them.

A plan is what a policy hands to a reconfiguration: the target knobs, the knobs it
starts from, and why. Its hash names it: a sensor uses it as the Dagster ``run_key``,
so the same decision taken from the same configuration is never applied twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from dagster_reconf.core.errors import SpecError, validated

if TYPE_CHECKING:
    from dagster_reconf.core.spec import StreamSpec

__all__ = ["Knobs", "OperatorScaling", "ScalingPlan", "ScalingStep", "known_cores", "spec_cores"]

_LOCAL = re.compile(r"^local\[(\d+)(,\d+)?\]$")


class Knobs(BaseModel):
    """The settings that decide a stream's capacity (DESIGN.md section 1, "Spark parallelism has several knobs")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cores: int = Field(..., ge=1, le=4096, description="Task slots: local[N] locally, spark.cores.max on a cluster.")
    source_partitions: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Partitions the source splits a batch into; None where the stream's source has no such knob.",
    )
    state_partitions: int = Field(
        ..., ge=1, le=10_000, description="Shuffle/state partitions (moving state to change)."
    )
    trigger_interval_s: float = Field(..., ge=0, le=3600, description="Processing-time trigger interval.")
    max_per_trigger: int | None = Field(None, ge=1, description="Cap per batch, in the source's own unit.")

    @classmethod
    def of(cls, spec: StreamSpec) -> "Knobs":
        """The knobs of a running stream's settings."""
        return cls(
            cores=spec_cores(spec),
            source_partitions=spec.source_partitions,
            state_partitions=spec.state_partitions,
            trigger_interval_s=spec.trigger_interval_s,
            max_per_trigger=spec.max_per_trigger,
        )

    def changes_for(self, spec: StreamSpec) -> dict[str, Any]:
        """Settings changes that turn ``spec`` into these knobs (empty when nothing differs)."""
        changes: dict[str, Any] = {}
        if self.cores != spec_cores(spec):
            local = _LOCAL.match(spec.master)
            if local:
                changes["master"] = f"local[{self.cores}{local.group(2) or ''}]"
            elif spec.master == "local":
                changes["master"] = f"local[{self.cores}]"
            else:
                changes.update(_cluster_cores(spec, self.cores))
        for field in ("source_partitions", "state_partitions", "trigger_interval_s", "max_per_trigger"):
            if getattr(self, field) != getattr(spec, field):
                changes[field] = getattr(self, field)
        return changes


def _cluster_cores(spec: StreamSpec, cores: int) -> dict[str, int]:
    """``max_cores`` for ``cores`` on a cluster master. Held in executors (a ``cores_ceiling``), it is rounded up to
    whole executors, and a count above the ceiling raises it (that change starts a new SparkContext)."""
    if spec.cores_ceiling is None or spec.executor_cores is None:
        return {"max_cores": cores}
    cores = -(-cores // spec.executor_cores) * spec.executor_cores
    return {"max_cores": cores, **({"cores_ceiling": cores} if cores > spec.cores_ceiling else {})}


def spec_cores(spec: StreamSpec) -> int:
    """Task slots a stream's settings give it.

    Raises:
        SpecError: a cluster master without ``max_cores`` (its core count is the cluster's to decide).
    """
    local = _LOCAL.match(spec.master)
    if local:
        return int(local.group(1))
    if spec.master == "local":
        return 1
    if spec.master == "local[*]":
        return os.cpu_count() or 1
    if spec.max_cores is None:
        raise SpecError(f"stream {spec.name!r} on {spec.master} has no max_cores; set it so its cores can be planned")
    return spec.max_cores


def known_cores(spec: StreamSpec) -> int | None:
    """:func:`spec_cores` for reports: None where the cluster decides (a cluster master without ``max_cores``)."""
    try:
        return spec_cores(spec)
    except SpecError:
        return None


StepKind = Literal["scale_up", "scale_down", "interval_change", "repartition", "hold"]


@dataclass(frozen=True)
class ScalingStep:
    """What a decision does to a stream's resources: its kind, and the cores it holds before and after.

    Why: an autoscaler is judged on efficiency as much as on keeping up, so every decision
    says what it saves or costs, as reserved core-seconds per hour (cores x 3600).
    ``interval_change``: the cores stay and the trigger interval moves; ``repartition``:
    only partitions or the batch cap move; ``hold``: nothing changes.
    """

    kind: StepKind
    cores_before: int
    cores_after: int

    @classmethod
    def between(cls, current: Knobs, target: Knobs) -> "ScalingStep":
        if target.cores != current.cores:
            kind: StepKind = "scale_up" if target.cores > current.cores else "scale_down"
        elif target.trigger_interval_s != current.trigger_interval_s:
            kind = "interval_change"
        else:
            kind = "hold" if target == current else "repartition"
        return cls(kind, current.cores, target.cores)

    @property
    def core_seconds_per_hour_before(self) -> int:
        return self.cores_before * 3600

    @property
    def core_seconds_per_hour_after(self) -> int:
        return self.cores_after * 3600

    @property
    def core_seconds_per_hour_saved(self) -> int:
        """Reserved core-seconds per hour the step gives back (negative: what it costs)."""
        return self.core_seconds_per_hour_before - self.core_seconds_per_hour_after

    def as_dict(self) -> dict[str, Any]:
        hourly = ("core_seconds_per_hour_before", "core_seconds_per_hour_after", "core_seconds_per_hour_saved")
        return {**asdict(self), **{name: getattr(self, name) for name in hourly}}

    def describe(self) -> str:
        """One line for logs and reports, e.g. ``scale_down: 12 -> 4 cores, saves 28,800 core-s/h``."""
        if self.kind == "hold":
            return f"hold: {self.cores_before} cores ({self.core_seconds_per_hour_before:,} core-s/h)"
        saved = self.core_seconds_per_hour_saved
        effect = (
            f"saves {saved:,} core-s/h" if saved > 0 else f"costs {-saved:,} core-s/h" if saved < 0 else "same cores"
        )
        return f"{self.kind}: {self.cores_before} -> {self.cores_after} cores, {effect}"


def _finite_or_none(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


Figure = Annotated[float | None, BeforeValidator(_finite_or_none)]  # NaN and infinity are None


class OperatorScaling(BaseModel):
    """One operator's row of a plan's scaling report. A figure is None where it is unknown or unbounded (a
    capacity with no measured cost), never NaN or infinity: the row travels as JSON and as Dagster run config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    operator: str
    kind: str
    parallelism_now: int
    parallelism_planned: int
    ds2_parallelism: int
    target_records_per_s: Figure = None
    true_processing_rate: Figure = None
    selectivity: Figure = None
    work_ms_per_event: Figure = None
    cpu_ms_per_event: Figure = None
    capacity_now_events_per_s: Figure = None
    capacity_planned_events_per_s: Figure = None
    skew: Figure = None


class ScalingPlan(BaseModel):
    """Target knobs for one stream, the knobs they replace, and the evidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stream: str
    policy: str
    current: Knobs
    target: Knobs
    reason: str
    epoch: str = Field("", description="Identifies the configuration the plan starts from (when it was started).")
    report: list[OperatorScaling] = Field(
        default_factory=list, description="Per operator: parallelism, capacity, target rate."
    )
    predicted: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _changes_something(self) -> "ScalingPlan":
        if self.current == self.target:
            raise ValueError("a plan must change at least one knob (target equals current)")
        return self

    @classmethod
    def parse(cls, data: dict[str, Any]) -> "ScalingPlan":
        """Validate a plan from run config or a file; errors name the field and the fix.

        Raises:
            SpecError: a missing or invalid field.
        """
        return validated(cls, data, "scaling plan")

    @property
    def plan_hash(self) -> str:
        """Stable hash of what the plan does and where it starts from (not of its evidence)."""
        core = {
            "stream": self.stream,
            "epoch": self.epoch,
            "current": self.current.model_dump(),
            "target": self.target.model_dump(),
        }
        return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def step(self) -> ScalingStep:
        """The kind of step and what it saves or costs (see :class:`ScalingStep`)."""
        return ScalingStep.between(self.current, self.target)

    def changed(self) -> dict[str, tuple[Any, Any]]:
        """Knob -> (from, to) for the knobs the plan changes."""
        return {
            k: (getattr(self.current, k), getattr(self.target, k))
            for k in Knobs.model_fields
            if getattr(self.current, k) != getattr(self.target, k)
        }
