"""The scaling policies by name: what a spec, a sensor or the benchmark names (``ds2``, ``dhalion``, ...)."""

from __future__ import annotations

from dagster_reconf.core.scaling.baselines import DhalionPolicy, DynamicAllocationPolicy
from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.policy import ScalingPolicy

__all__ = ["POLICIES"]

POLICIES: dict[str, type[ScalingPolicy]] = {p.name: p for p in (DS2Policy, DhalionPolicy, DynamicAllocationPolicy)}
