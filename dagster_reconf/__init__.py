"""dagster-reconf: a Dagster control plane for stateful Spark Structured Streaming jobs.

``dagster_reconf.core`` knows nothing of Dagster (workloads, runtime, supervisor,
control endpoint); the modules beside it are the Dagster building blocks over it.
Importing this package loads neither pyspark nor Dagster; its public names load on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .version import __version__

# Public name -> the module that defines it. Loaded on first use (PEP 562): Spark's Python
# workers import dagster_reconf.core.workloads for the bundled sources, and must not pay
# for Dagster (~2 s per worker process, much of a restarted stream's first batch).
_EXPORTS = {
    "ReconfError": ".core.errors", "SpecError": ".core.errors", "StreamNotFoundError": ".core.errors",
    "StreamStartError": ".core.errors", "StreamStateError": ".core.errors",
    "AuditLedger": ".core.ledger",
    "ExecutionPlan": ".core.reconfig", "ReconfigurationInterrupted": ".core.reconfig",
    "ReconfigurationRefused": ".core.reconfig", "Reconfigurer": ".core.reconfig",
    "StreamSpec": ".core.spec",
    "StreamSupervisor": ".core.supervisor",
    "build_reconfiguration_failure_sensor": ".reconfiguration_assets", "build_stream_configuration": ".reconfiguration_assets",
    "AuditLedgerResource": ".resources", "StreamRuntimeResource": ".resources",
    "ScalingAssets": ".scaling_assets", "build_scaling_assets": ".scaling_assets",
    "build_scaling_sensor": ".scaling_sensor",
    "build_stream_progress_sensor": ".sensor_builder",
    "TraceAssets": ".trace_assets", "build_trace_assets": ".trace_assets",
}

if TYPE_CHECKING:
    from .core.errors import ReconfError, SpecError, StreamNotFoundError, StreamStartError, StreamStateError
    from .core.ledger import AuditLedger
    from .core.reconfig import ExecutionPlan, ReconfigurationInterrupted, ReconfigurationRefused, Reconfigurer
    from .core.spec import StreamSpec
    from .core.supervisor import StreamSupervisor
    from .reconfiguration_assets import build_reconfiguration_failure_sensor, build_stream_configuration
    from .resources import AuditLedgerResource, StreamRuntimeResource
    from .scaling_assets import ScalingAssets, build_scaling_assets
    from .scaling_sensor import build_scaling_sensor
    from .sensor_builder import build_stream_progress_sensor
    from .trace_assets import TraceAssets, build_trace_assets


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
    "ReconfError",
    "ReconfigurationInterrupted",
    "ReconfigurationRefused",
    "Reconfigurer",
    "ScalingAssets",
    "SpecError",
    "StreamNotFoundError",
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
    "build_stream_progress_sensor",
    "build_trace_assets",
]
