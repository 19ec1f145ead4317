"""Reconfigurations: execution plans, their diff, and the steps that carry a plan out safely.

No Dagster here; :mod:`dagster_reconf.dagster.reconfiguration_assets` builds the Dagster ops over it.
"""

from dagster_reconf.core.errors import ReconfigurationInterrupted, ReconfigurationRefused
from dagster_reconf.core.reconfig.handles import DriverStream, LocalStream, StreamHandle
from dagster_reconf.core.reconfig.plan import (
    Action,
    ExecutionLogic,
    ExecutionPlan,
    Partitioning,
    PlanDiff,
    Resources,
    diff_plans,
)
from dagster_reconf.core.reconfig.reconfiguration import Reconfiguration
from dagster_reconf.core.reconfig.reconfigurer import PAUSED_STEPS, STEPS, Reconfigurer
from dagster_reconf.core.reconfig.remote_stream import RemoteStream
from dagster_reconf.core.spec import STRATEGIES

__all__ = [
    "Action",
    "DriverStream",
    "ExecutionLogic",
    "ExecutionPlan",
    "LocalStream",
    "Partitioning",
    "PAUSED_STEPS",
    "PlanDiff",
    "Reconfiguration",
    "ReconfigurationInterrupted",
    "ReconfigurationRefused",
    "Reconfigurer",
    "RemoteStream",
    "Resources",
    "STEPS",
    "STRATEGIES",
    "StreamHandle",
    "diff_plans",
]
