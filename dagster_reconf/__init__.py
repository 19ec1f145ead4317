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

from .version import __version__

# Public name -> the module that defines it. Loaded on first use (PEP 562): Spark's Python
# workers import dagster_reconf.workloads.sources for the bundled sources, and must not pay
# for Dagster (~2 s per worker process, much of a restarted stream's first batch).
_EXPORTS = {
    "ReconfError": ".core.errors", "SpecError": ".core.errors", "StreamNotFoundError": ".core.errors",
    "StreamStartError": ".core.errors", "StreamStateError": ".core.errors",
    "AuditLedger": ".core.ledger",
    "ExecutionPlan": ".core.reconfig", "ReconfigurationInterrupted": ".core.reconfig",
    "ReconfigurationRefused": ".core.reconfig", "Reconfigurer": ".core.reconfig",
    "StreamSpec": ".core.spec",
    "StreamContext": ".core.definition", "StreamDefinition": ".core.definition", "StreamOutput": ".core.definition",
    "stream_definition": ".core.definition",
    "StreamSupervisor": ".core.supervisor",
    "build_reconfiguration_failure_sensor": ".dagster.reconfiguration_assets",
    "build_stream_configuration": ".dagster.reconfiguration_assets",
    "AuditLedgerResource": ".dagster.resources", "StreamRuntimeResource": ".dagster.resources",
    "ExecutionPlanConfig": ".dagster.run_config", "ReconfigureConfig": ".dagster.run_config",
    "ScalingPlanConfig": ".dagster.run_config", "Strategy": ".dagster.run_config",
    "ScalingAssets": ".dagster.scaling_assets", "build_scaling_assets": ".dagster.scaling_assets",
    "build_scaling_sensor": ".dagster.scaling_sensor",
    "build_streams_sensor": ".dagster.streams_sensor",
    "ReconfTranslator": ".dagster.translator",
    "build_stream_progress_sensor": ".dagster.sensor_builder",
    "build_stream_control_job": ".dagster.stream_jobs",
    "TraceAssets": ".dagster.trace_assets", "build_trace_assets": ".dagster.trace_assets",
}

if TYPE_CHECKING:
    from .core.definition import StreamContext, StreamDefinition, StreamOutput, stream_definition
    from .core.errors import ReconfError, SpecError, StreamNotFoundError, StreamStartError, StreamStateError
    from .core.ledger import AuditLedger
    from .core.reconfig import ExecutionPlan, ReconfigurationInterrupted, ReconfigurationRefused, Reconfigurer
    from .core.spec import StreamSpec
    from .core.supervisor import StreamSupervisor
    from .dagster.reconfiguration_assets import build_reconfiguration_failure_sensor, build_stream_configuration
    from .dagster.resources import AuditLedgerResource, StreamRuntimeResource
    from .dagster.run_config import ExecutionPlanConfig, ReconfigureConfig, ScalingPlanConfig, Strategy
    from .dagster.scaling_assets import ScalingAssets, build_scaling_assets
    from .dagster.scaling_sensor import build_scaling_sensor
    from .dagster.sensor_builder import build_stream_progress_sensor
    from .dagster.stream_jobs import build_stream_control_job
    from .dagster.streams_sensor import build_streams_sensor
    from .dagster.trace_assets import TraceAssets, build_trace_assets
    from .dagster.translator import ReconfTranslator


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dagster_reconf' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "AuditLedger",
    "AuditLedgerResource",
    "ExecutionPlan",
    "ExecutionPlanConfig",
    "ReconfError",
    "ReconfTranslator",
    "ReconfigurationInterrupted",
    "ReconfigurationRefused",
    "ReconfigureConfig",
    "Reconfigurer",
    "ScalingAssets",
    "ScalingPlanConfig",
    "SpecError",
    "Strategy",
    "StreamContext",
    "StreamDefinition",
    "StreamNotFoundError",
    "StreamOutput",
    "StreamRuntimeResource",
    "StreamSpec",
    "StreamStartError",
    "StreamStateError",
    "StreamSupervisor",
    "TraceAssets",
    "__version__",
    "build_reconfiguration_failure_sensor",
    "build_scaling_assets",
    "build_scaling_sensor",
    "build_stream_configuration",
    "build_stream_control_job",
    "build_stream_progress_sensor",
    "build_streams_sensor",
    "build_trace_assets",
    "stream_definition",
]
