"""Dagster resources over the stream runtime and the audit ledger.

:class:`StreamRuntimeResource` is how assets, sensors and ops reach managed streams:
it names the runtime home (where every stream's spec, metrics store, checkpoint and
event log live) and hands out the core's supervisor and metrics store. It holds no
Spark session: streams run in their own long-lived driver processes, and Dagster runs
stay short.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
from pydantic import Field

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.remote_supervisor import RemoteSupervisor
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import DriverStream, RemoteStream, StreamHandle
from dagster_reconf.core.store.metrics import MetricsStore, progress_frame
from dagster_reconf.core.store.paths import StreamPaths, default_home
from dagster_reconf.core.store.storage import Location
from dagster_reconf.core.traces.store import TraceStore

__all__ = ["AuditLedgerResource", "StreamRuntimeResource"]


class StreamRuntimeResource(dg.ConfigurableResource):
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
    handover: bool = Field(
        default=True,
        description="Reconfigurations that need a new SparkContext (cores, master, executors) start a warm standby "
        "driver while the stream runs and hand the stream over to it at the pause, so the resume pays no SparkContext "
        "or Python worker start-up. False restarts the SparkContext in the paused driver. Default: true.",
    )

    remote: bool = Field(
        default=False,
        description="The streams' drivers run on other hosts, sharing only their storage with this one: each is "
        "reached through the control endpoint it publishes under its spec's storage (with the token in the "
        "environment variable its control_token_env names), started and stopped by the agent on its host "
        "(`reconf agent`), and its metrics are copied into this home as they are read. Default: false (the drivers "
        "run on this host, under home).",
    )

    @property
    def home_path(self) -> Path:
        return Path(self.home).resolve()

    def supervisor(self) -> StreamSupervisor:
        """The core supervisor: start, status, restart and stop streams (on other hosts where ``remote``)."""
        return RemoteSupervisor(self.home_path) if self.remote else StreamSupervisor(self.home_path)

    def handle(self, stream: str) -> StreamHandle:
        """``stream`` as a reconfiguration reaches it: its driver on this host, or on another where ``remote``."""
        if self.remote:
            return RemoteStream(self.supervisor().require(stream))
        return DriverStream(self.supervisor(), stream)

    def metrics(self, stream: str) -> MetricsStore:
        """The append-only progress store of ``stream`` (readable while it runs; where ``remote``, this host's copy,
        pulled from the driver before each read)."""
        return self.supervisor().metrics(stream)

    def progress(self, stream: str, cursor: int = 0) -> tuple[pd.DataFrame, int]:
        """Per-batch figures of ``stream`` recorded after byte ``cursor``, and the next cursor."""
        records, next_cursor = self.metrics(stream).read(cursor)
        return progress_frame(records), next_cursor

    def event_log_dir(self, stream: str) -> Location:
        """Where the stream's drivers write Spark event logs."""
        return StreamPaths(self.home_path, stream).event_log

    def checkpoint(self, stream: str) -> Location:
        """The checkpoint in force of ``stream`` (under its storage URL where its spec sets one)."""
        return StreamPaths(self.home_path, stream).checkpoint

    def trace_store(self, stream: str) -> TraceStore:
        """The stream's trace store (incrementally ingested activities)."""
        return TraceStore(StreamPaths(self.home_path, stream).traces)

    def attached(self, stream: str) -> bool:
        """Whether ``stream`` is attached: observed from its event logs, never run or reconfigured here."""
        return StreamPaths(self.home_path, stream).attached.is_file()

    def refresh(self, stream: str) -> dict[str, Any]:
        """Read what is new in an attached stream's event logs into its metrics store (nothing for a managed stream,
        whose driver records its own)."""
        paths = StreamPaths(self.home_path, stream)
        if not paths.attached.is_file():
            return {}
        from dagster_reconf.core.traces.attach import AttachedReader

        return AttachedReader(paths).refresh()

    def query_ids(self, stream: str) -> list[str] | None:
        """The query ids the stream ran under (its activities in the trace store); None before it first ran."""
        return StreamPaths(self.home_path, stream).query_ids or None

    def status(self, stream: str) -> dict[str, Any]:
        """Live status from the driver, or the last recorded figures when it is not running."""
        return self.supervisor().status(stream)


class AuditLedgerResource(dg.ConfigurableResource):
    """The audit ledger where reconfigurations are journaled and recorded.

    Examples:
        .. code-block:: python

            AuditLedgerResource(home=".reconf")  # SQLite file .reconf/ledger.db: give it the streams' home
            AuditLedgerResource(url=EnvVar("RECONF_LEDGER_URL"))  # postgresql://user:password@host:5432/db
    """

    url: str = Field(
        default="",
        description="SQLAlchemy URL of the ledger database: sqlite:///path/ledger.db or "
        "postgresql://user:password@host:port/database. "
        "Empty (default): the SQLite file ledger.db in the runtime home.",
    )
    home: str = Field(
        default="",
        description="The runtime home whose ledger.db is used when url is empty: the same home as the streams "
        "resource's, so the CLI and Dagster share one ledger. Empty: $RECONF_HOME, or ./.reconf.",
    )

    def ledger(self) -> AuditLedger:
        """The ledger (schema created or upgraded on first use)."""
        return AuditLedger(self.url or default_ledger_url(Path(self.home).resolve() if self.home else default_home()))
