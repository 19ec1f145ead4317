"""The supervisor of a control plane whose streams' drivers run on other hosts.

It answers what :class:`~dagster_reconf.core.process.supervisor.StreamSupervisor` answers (list, status, start,
stop, a client), for the streams registered in this host's runtime home, over what crosses the network only: a
driver runs where its published endpoint answers (:mod:`.endpoint_record`), it died where its record is still
published and nothing answers (a clean exit withdraws it), and it is started and stopped by the agent on its host
(:mod:`.host_agent`). Its metrics are this host's copy, pulled from the driver as they are read.
"""

from __future__ import annotations

import json
import time
from typing import Any

from dagster_reconf.core.errors import ControlRequestError, StreamStateError
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.endpoint_record import (
    ControlEndpoint,
    check_remote_spec,
    read_endpoint,
    remote_client,
)
from dagster_reconf.core.process.host_agent import ask_agent
from dagster_reconf.core.process.metrics_mirror import pulled_store
from dagster_reconf.core.process.supervisor import DEFAULT_START_TIMEOUT_S, StreamSupervisor
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths, storage_root

__all__ = ["RemoteSupervisor"]

COPY_WAIT_S = 15.0


class RemoteSupervisor(StreamSupervisor):
    """Streams under ``home`` on this host, each run by a driver on another host (its spec names the storage where
    the driver publishes its endpoint, and the token's environment variable)."""

    def spec(self, name: str) -> StreamSpec:
        return StreamSpec.parse(json.loads(self.require(name).spec.read_text()))

    def driver_info(self, name: str) -> dict[str, Any] | None:
        """The driver's published endpoint, where it answers; None otherwise."""
        endpoint, status = self._probe(name)
        if endpoint is None or status is None:
            return None
        return {
            "pid": endpoint.pid,
            "host": endpoint.driver_host,
            "control_port": endpoint.port,
            "control_host": endpoint.host,
            "status": "running",
            "app_id": status.get("app_id"),
            "started_at": endpoint.started_at,
        }

    def driver_death(self, name: str) -> dict[str, Any] | None:
        """A driver whose endpoint record is still published but does not answer: it ended without withdrawing it."""
        endpoint, status = self._probe(name)
        return self._death(name, endpoint) if endpoint is not None and status is None else None

    def _not_running(self, paths: StreamPaths) -> str:
        """As the base class says, from the one probe of the listing (a silent endpoint can take its full I/O timeout
        to answer nothing: asked twice, a listing would wait twice)."""
        if paths.attached.is_file():
            return "attached"
        endpoint, _ = self._probe(paths.name, ask=False)
        return "died" if endpoint is not None else "not running"

    def _probe(self, name: str, ask: bool = True) -> tuple[ControlEndpoint | None, dict[str, Any] | None]:
        """The stream's published endpoint record (None: none published, or the spec cannot reach one) and, where
        ``ask``, its answer to a status request (None: it did not answer)."""
        paths = self.paths(name)
        if not paths.spec.is_file():
            return None, None
        spec = StreamSpec.parse(json.loads(paths.spec.read_text()))
        try:
            check_remote_spec(spec)
            endpoint = read_endpoint(storage_root(str(spec.storage), name))
        except (ControlRequestError, StreamStateError, OSError):
            return None, None
        if not ask:
            return endpoint, None
        try:
            return endpoint, remote_client(spec).status()
        except (ControlRequestError, StreamStateError, OSError):
            return endpoint, None

    def _death(self, name: str, endpoint: ControlEndpoint) -> dict[str, Any]:
        metrics = self.paths(name).metrics
        seen = metrics.stat().st_mtime if metrics.exists() else endpoint.started_at
        return {"pid": endpoint.pid, "host": endpoint.driver_host, "last_seen_at": seen}

    def metrics(self, name: str) -> MetricsStore:
        """This host's copy of the driver's metrics, pulled before each read (an attached stream's own store)."""
        paths = self.paths(name)
        return MetricsStore(paths.metrics) if paths.attached.is_file() else pulled_store(paths)

    def standby_info(self, name: str) -> dict[str, Any] | None:
        return None

    def client(self, name: str) -> ControlClient:
        spec = self.spec(name)
        try:
            return remote_client(spec)
        except ControlRequestError as exc:
            raise StreamStateError(f"stream {name!r} has no running driver: {exc}") from None

    def start(
        self, spec: StreamSpec, *, timeout_s: float = DEFAULT_START_TIMEOUT_S, paused: bool = False
    ) -> dict[str, Any]:
        """Register ``spec`` here and have the agent on the driver's host start it; the agent's answer.

        Raises:
            SpecError: the spec gives no storage or token variable.
            StreamStateError: its driver already runs.
            StreamStartError: the agent refused or failed the start (its reason), or no agent answered.
        """
        check_remote_spec(spec)  # the rest is checked on the driver's host, where the stream's code is
        if self.driver_info(spec.name) is not None:
            raise StreamStateError(f"stream {spec.name!r} is already running; stop it first or pick another name")
        paths = self.paths(spec.name)
        paths.create()
        paths.write_spec(spec.model_dump_json(indent=2))
        answer = ask_agent(str(spec.storage), spec.name, "start", timeout_s, spec, paused)
        return {"name": spec.name, "pid": answer.pid, "host": answer.host, "message": answer.message}

    def stop(self, name: str, timeout_s: float = 120.0) -> dict[str, Any]:
        """Stop the query at a batch boundary, copy the metrics of its last batches here, then have the agent on the
        driver's host end the driver (the copy is all this host keeps of them: an oracle reads the last watermark
        there)."""
        spec = self.spec(name)
        try:
            stopped = self.client(name).stop(timeout_s)
            stopped["metrics_copied"] = self._await_copy(name, COPY_WAIT_S)
        except (ControlRequestError, StreamStateError) as exc:
            stopped = {"error": str(exc)}
        answer = ask_agent(str(spec.storage), name, "stop", timeout_s + 30.0)
        return {"name": name, "stopped": answer.message == "stopped", "stop": stopped, "host": answer.host}

    def _await_copy(self, name: str, timeout_s: float) -> bool:
        """Pull until the copy holds the last committed batch's record (Spark hands a batch's progress to the
        driver's listener after its commit, so it may land a moment after the stop); whether it did in time."""
        last = checkpoint_facts(self.paths(name).checkpoint).last_committed_batch
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.metrics(name).last_progress()
            if last is None or (record is not None and record["progress"].get("batchId", -1) >= last):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    def start_standby(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise StreamStateError("a warm standby is started beside its driver: not from another host")

    def clean_up_drivers(self, name: str) -> list[int]:
        return []
