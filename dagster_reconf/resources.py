"""Dagster resources over the stream runtime.

:class:`StreamRuntimeResource` is how assets, sensors and ops reach managed streams:
it names the runtime home (where every stream's spec, metrics store, checkpoint and
event log live) and hands out the core's supervisor and metrics store. It holds no
Spark session: streams run in their own long-lived driver processes, and Dagster runs
stay short.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from dagster import ConfigurableResource
from pydantic import Field

from .core.metrics import MetricsStore, progress_frame
from .core.paths import StreamPaths
from .core.supervisor import StreamSupervisor
from .core.traces.store import TraceStore

__all__ = ["StreamRuntimeResource"]


class StreamRuntimeResource(ConfigurableResource):
    """Access to the managed streams under one runtime home.

    Examples:
        .. code-block:: python

            defs = Definitions(assets=[...], resources={"streams": StreamRuntimeResource(home=".reconf")})
    """

    home: str = Field(
        default=".reconf",
        description="Runtime home directory holding every managed stream (relative paths resolve against the "
        "code location's working directory). Default: .reconf.",
    )

    @property
    def home_path(self) -> Path:
        return Path(self.home).resolve()

    def supervisor(self) -> StreamSupervisor:
        """The core supervisor: start, status, restart and stop streams."""
        return StreamSupervisor(self.home_path)

    def metrics(self, stream: str) -> MetricsStore:
        """The append-only progress store of ``stream`` (readable while it runs)."""
        return MetricsStore(StreamPaths(self.home_path, stream).metrics)

    def progress(self, stream: str, cursor: int = 0) -> tuple[pd.DataFrame, int]:
        """Per-batch figures of ``stream`` recorded after byte ``cursor``, and the next cursor."""
        records, next_cursor = self.metrics(stream).read(cursor)
        return progress_frame(r["progress"] for r in records if r.get("kind") == "progress"), next_cursor

    def event_log_dir(self, stream: str) -> Path:
        """Where the stream's drivers write Spark event logs."""
        return StreamPaths(self.home_path, stream).event_log

    def trace_store(self, stream: str) -> TraceStore:
        """The stream's trace store (incrementally ingested activities)."""
        return TraceStore(StreamPaths(self.home_path, stream).traces)

    def status(self, stream: str) -> dict[str, Any]:
        """Live status from the driver, or the last recorded figures when it is not running."""
        return self.supervisor().status(stream)
