"""dagster-reconf: a Dagster control plane for stateful Spark Structured Streaming jobs.

Three parts:

* ``dagster_reconf.core``: the control plane, which knows nothing of Dagster (stream
  definitions and specs, the runtime and its supervised drivers, traces and CP, the
  scaling model and policy, execution plans and reconfigurations, the audit ledger);
* ``dagster_reconf.dagster``: the Dagster building blocks over it (resources, asset and
  sensor factories, the reconfiguration ops);
* ``dagster_reconf.workloads``: the streams we ship as examples and benchmarks (Nexmark
  and word count), written against the same public API as a user's own streams.

Importing this package loads neither pyspark nor Dagster; its public names load on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from dagster_reconf.version import __version__

# Public names by use, each name -> the module that defines it. Loaded on first use (PEP 562): Spark's Python
# workers import dagster_reconf.workloads.sources for the bundled sources, and must not pay for Dagster.
_STREAM_API = {  # writing a managed stream
    "OutputComparison": "dagster_reconf.core.definition",
    "StreamContext": "dagster_reconf.core.definition",
    "StreamDefinition": "dagster_reconf.core.definition",
    "StreamOutput": "dagster_reconf.core.definition",
    "StreamSpec": "dagster_reconf.core.spec",
    "stream_definition": "dagster_reconf.core.definition",
}
_ENGINE = {  # running, planning and reconfiguring streams without Dagster
    "AuditLedger": "dagster_reconf.core.ledger",
    "ExecutionPlan": "dagster_reconf.core.reconfig",
    "PolicyConfig": "dagster_reconf.core.scaling.policy_config",
    "ReconfError": "dagster_reconf.core.errors",
    "ReconfigurationInterrupted": "dagster_reconf.core.errors",
    "ReconfigurationRefused": "dagster_reconf.core.errors",
    "Reconfigurer": "dagster_reconf.core.reconfig",
    "SpecError": "dagster_reconf.core.errors",
    "StreamNotFoundError": "dagster_reconf.core.errors",
    "StreamStartError": "dagster_reconf.core.errors",
    "StreamStateError": "dagster_reconf.core.errors",
    "StreamSupervisor": "dagster_reconf.core.process.supervisor",
}
_DAGSTER = {  # the Dagster building blocks
    "AssetKind": "dagster_reconf.dagster.translator",
    "AuditLedgerResource": "dagster_reconf.dagster.resources",
    "ExecutionPlanConfig": "dagster_reconf.dagster.run_config",
    "ReconfStreamsComponent": "dagster_reconf.dagster.components",
    "ReconfTranslator": "dagster_reconf.dagster.translator",
    "ReconfigureConfig": "dagster_reconf.dagster.run_config",
    "ScalingAssets": "dagster_reconf.dagster.scaling_assets",
    "ScalingPlanConfig": "dagster_reconf.dagster.run_config",
    "Strategy": "dagster_reconf.dagster.run_config",
    "StreamRuntimeResource": "dagster_reconf.dagster.resources",
    "TraceAssets": "dagster_reconf.dagster.trace_assets",
    "build_reconfiguration_failure_sensor": "dagster_reconf.dagster.reconfiguration_assets",
    "build_scaling_assets": "dagster_reconf.dagster.scaling_assets",
    "build_scaling_sensor": "dagster_reconf.dagster.scaling_sensor",
    "build_stream_configuration": "dagster_reconf.dagster.reconfiguration_assets",
    "build_stream_control_job": "dagster_reconf.dagster.stream_jobs",
    "build_stream_progress_sensor": "dagster_reconf.dagster.progress_sensor",
    "build_stream_state_asset": "dagster_reconf.dagster.state_assets",
    "build_streams_sensor": "dagster_reconf.dagster.streams_sensor",
    "build_trace_assets": "dagster_reconf.dagster.trace_assets",
}
_EXPORTS = {**_STREAM_API, **_ENGINE, **_DAGSTER}

if TYPE_CHECKING:
    from dagster_reconf.core.definition import (
        OutputComparison,
        StreamContext,
        StreamDefinition,
        StreamOutput,
        stream_definition,
    )
    from dagster_reconf.core.errors import (
        ReconfError,
        SpecError,
        StreamNotFoundError,
        StreamStartError,
        StreamStateError,
    )
    from dagster_reconf.core.ledger import AuditLedger
    from dagster_reconf.core.process.supervisor import StreamSupervisor
    from dagster_reconf.core.reconfig import (
        ExecutionPlan,
        ReconfigurationInterrupted,
        ReconfigurationRefused,
        Reconfigurer,
    )
    from dagster_reconf.core.scaling.policy_config import PolicyConfig
    from dagster_reconf.core.spec import StreamSpec
    from dagster_reconf.dagster.components import ReconfStreamsComponent
    from dagster_reconf.dagster.progress_sensor import build_stream_progress_sensor
    from dagster_reconf.dagster.reconfiguration_assets import (
        build_reconfiguration_failure_sensor,
        build_stream_configuration,
    )
    from dagster_reconf.dagster.resources import AuditLedgerResource, StreamRuntimeResource
    from dagster_reconf.dagster.run_config import ExecutionPlanConfig, ReconfigureConfig, ScalingPlanConfig, Strategy
    from dagster_reconf.dagster.scaling_assets import ScalingAssets, build_scaling_assets
    from dagster_reconf.dagster.scaling_sensor import build_scaling_sensor
    from dagster_reconf.dagster.state_assets import build_stream_state_asset
    from dagster_reconf.dagster.stream_jobs import build_stream_control_job
    from dagster_reconf.dagster.streams_sensor import build_streams_sensor
    from dagster_reconf.dagster.trace_assets import TraceAssets, build_trace_assets
    from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dagster_reconf' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "__version__",
    # writing a managed stream
    "OutputComparison",
    "StreamContext",
    "StreamDefinition",
    "StreamOutput",
    "StreamSpec",
    "stream_definition",
    # running, planning and reconfiguring streams without Dagster
    "AuditLedger",
    "ExecutionPlan",
    "PolicyConfig",
    "ReconfError",
    "ReconfigurationInterrupted",
    "ReconfigurationRefused",
    "Reconfigurer",
    "SpecError",
    "StreamNotFoundError",
    "StreamStartError",
    "StreamStateError",
    "StreamSupervisor",
    # the Dagster building blocks
    "AssetKind",
    "AuditLedgerResource",
    "ExecutionPlanConfig",
    "ReconfStreamsComponent",
    "ReconfTranslator",
    "ReconfigureConfig",
    "ScalingAssets",
    "ScalingPlanConfig",
    "Strategy",
    "StreamRuntimeResource",
    "TraceAssets",
    "build_reconfiguration_failure_sensor",
    "build_scaling_assets",
    "build_scaling_sensor",
    "build_stream_configuration",
    "build_stream_control_job",
    "build_stream_progress_sensor",
    "build_stream_state_asset",
    "build_streams_sensor",
    "build_trace_assets",
]
