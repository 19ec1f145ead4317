"""Every setting of the scaling policies, in one validated place (the Flink autoscaler's options, for micro-batches).

A metric window and activation only on a stable signal, stabilization after every reconfiguration, a utilization
band, delayed scale-down, bounds per knob, the restart's own cost counted in the catch-up, and a recommend-only mode.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dagster_reconf.core.errors import validated
from dagster_reconf.core.scaling.sizing import Limits

__all__ = ["PolicyConfig"]


class PolicyConfig(BaseModel):
    """Everything that decides when a policy acts (see module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_batches: int = Field(6, ge=2, description="Batches of the current configuration a decision needs.")
    warmup_batches: int = Field(2, ge=0, description="First batches after a restart left out (warm-up).")
    stabilization_s: float = Field(
        10.0, ge=0, description="After a reconfiguration: no decision, and its batches are not evidence."
    )
    utilization_target: float = Field(0.7, gt=0, le=1, description="Share of the trigger interval a batch should take.")
    utilization_low: float = Field(
        0.35, ge=0, le=1, description="Below this, and no backlog, the stream is over-provisioned."
    )
    utilization_high: float = Field(0.9, gt=0, le=2, description="Above this the stream is at its limit.")
    backlog_growth_tolerance: float = Field(
        0.05, ge=0, description="Backlog growth, as a share of the source rate, still healthy."
    )
    scale_down_delay_s: float = Field(
        30.0, ge=0, description="Age before a scale-down, and its plan covers this long's peak rate."
    )
    catch_up_s: float = Field(60.0, gt=0, description="Clear the backlog within this long.")
    min_cores: int = Field(1, ge=1)
    max_cores: int = Field(32, ge=1)
    min_state_partitions: int = Field(1, ge=1)
    max_state_partitions: int = Field(512, ge=1)
    max_trigger_interval_s: float = Field(30.0, gt=0)
    plan_trigger: bool = Field(
        True,
        description="May plans change the trigger interval? Never where the stream's definition sets its own "
        "trigger, whatever this says: that one is the user's.",
    )
    max_coordination: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="Largest share of a batch's budget (utilization x interval) its fixed costs may take; past it "
        "the interval grows, never the cores.",
    )
    allow_state_migration: bool = Field(True, description="May plans change state partitions (a state migration)?")
    default_restart_s: float = Field(3.0, ge=0, description="Restart time assumed before one was measured.")
    recommend_only: bool = Field(False, description="Materialize plans but never request a reconfiguration run.")
    increment: int = Field(1, ge=1, description="Dhalion baseline: cores added or removed per step.")

    @model_validator(mode="after")
    def _ordered(self) -> "PolicyConfig":
        if not self.utilization_low < self.utilization_target < self.utilization_high:
            raise ValueError(
                f"need utilization_low < utilization_target < utilization_high, got "
                f"{self.utilization_low} < {self.utilization_target} < {self.utilization_high}"
            )
        if self.min_cores > self.max_cores:
            raise ValueError(f"min_cores {self.min_cores} > max_cores {self.max_cores}")
        return self

    @classmethod
    def parse(cls, data: PolicyConfig | dict[str, Any] | None) -> PolicyConfig:
        """Validate a policy configuration; errors name the field and the allowed values."""
        if isinstance(data, cls):
            return data
        return validated(cls, data or {}, "policy config")

    def limits(self) -> Limits:
        """The model's limits. A plan keeps its steady state halfway between the low edge and the target, a margin
        for the model's error: below the low edge the policy would scale it down again once the backlog is gone."""
        floor = (self.utilization_low + self.utilization_target) / 2
        same_names = {f.name for f in dataclasses.fields(Limits)} & set(type(self).model_fields)
        return Limits(
            utilization=self.utilization_target,
            utilization_floor=floor,
            **{name: getattr(self, name) for name in same_names},
        )
