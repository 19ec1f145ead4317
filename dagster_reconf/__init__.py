"""dagster-reconf: a Dagster control plane for stateful Spark Structured Streaming jobs.

``dagster_reconf.core`` knows nothing of Dagster (workloads, runtime, supervisor,
control endpoint); the modules beside it are the Dagster building blocks over it.
Importing this package does not load pyspark.
"""

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
from .version import __version__

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
