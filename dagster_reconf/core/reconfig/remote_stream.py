"""A stream whose driver runs on another host, as a reconfiguration on this host reaches it.

Everything crosses the network: the driver's control endpoint (found in the endpoint record it publishes under the
stream's storage, authenticated with the token from the environment variable the spec names), the checkpoint in the
stream's storage, and the driver's metrics, copied into this host's runtime home as they are read. This host starts
no process on the other one: a driver that is down is started there by the host's agent
(:mod:`~dagster_reconf.core.process.host_agent`), asked through the storage; where no agent answers, the
reconfiguration stops with that said (it starts paused there while this host holds the stream paused).
"""

from __future__ import annotations

import json
import socket
from typing import Any, Literal

from dagster_reconf.core.errors import ControlRequestError, StreamStartError, StreamStateError
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.endpoint_record import (
    check_remote_spec,
    clear_pause_marker,
    remote_client,
    set_pause_marker,
)
from dagster_reconf.core.process.host_agent import HostAnswer, ask_agent
from dagster_reconf.core.process.metrics_mirror import PulledMetricsStore, pulled_store
from dagster_reconf.core.reconfig.handles import EndpointStream
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import Location

__all__ = ["RemoteStream"]


class RemoteStream(EndpointStream):
    """The stream registered under ``paths`` (its spec in this host's home), run by a driver on another host."""

    def __init__(self, paths: StreamPaths, agent_timeout_s: float = 300.0) -> None:
        self.paths = paths
        self.agent_timeout_s = agent_timeout_s
        check_remote_spec(self.spec())  # no storage or token variable: a SpecError naming both, before anything runs

    def spec(self) -> StreamSpec:
        return StreamSpec.parse(json.loads(self.paths.spec.read_text()))

    def _client(self) -> ControlClient:
        return remote_client(self.spec())

    def metrics(self) -> PulledMetricsStore:
        return pulled_store(self.paths)

    def status(self) -> dict[str, Any]:
        try:
            return self._client().status()
        except ControlRequestError as exc:
            return {"name": self.name, "state": "not running", "error": str(exc)}

    def ask_agent(self, action: Literal["start", "stop"], paused: bool = False) -> HostAnswer:
        """Have the driver host's agent start (with this host's spec) or stop the stream's driver; its answer.

        Raises:
            StreamStartError: the agent refused, failed, or none answered within ``agent_timeout_s``.
        """
        spec = self.spec()
        assert spec.storage is not None  # checked at construction
        return ask_agent(
            spec.storage, self.name, action, self.agent_timeout_s, spec if action == "start" else None, paused
        )

    def ensure_driver(self) -> None:
        status = self.status()
        if status.get("state") != "not running":
            return
        try:
            self.ask_agent("start", paused=True)
        except StreamStartError as exc:
            raise StreamStateError(
                f"stream {self.name!r} has no driver answering on its host ({status.get('error')}), and {exc}; start "
                "it there (`reconf agent`, or `reconf stream start --spec-file ...`), then run the reconfiguration "
                "again"
            ) from None

    def restart_lost_driver(self) -> dict[str, Any]:
        if self.status().get("state") != "not running":
            return {"started": False}
        answer = self.ask_agent("start")
        return {"started": True, "driver": "new", "host": answer.host, "pid": answer.pid}

    def ensure_running(self) -> dict[str, Any]:
        started = self.restart_lost_driver()
        if started["started"]:
            return started
        if self.status().get("state") != "running":
            self._client().start()
            return {"started": True, "driver": "kept"}
        return {"started": False}

    def _data_root(self) -> Location:
        return self.paths.data_root_for(self.spec().storage)

    def pause(self, timeout_s: float, finish: bool = True, keep_interrupted: bool = False) -> dict[str, Any]:
        """Stop the query at a batch boundary, the pause marker set first: a driver its host starts again before the
        resume starts paused (see :mod:`~dagster_reconf.core.process.endpoint_record`)."""
        set_pause_marker(self._data_root(), f"paused for a reconfiguration from {socket.gethostname()}")
        return self._client().stop(timeout_s, finish, keep_interrupted)

    def release_pause(self) -> None:
        clear_pause_marker(self._data_root())

    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Start the paused query with ``settings``; this host's copy of the spec takes the driver's new one."""
        result = self._client().resume(settings)
        clear_pause_marker(self._data_root())
        self.paths.write_spec(StreamSpec.parse(self._client().status()["spec"]).model_dump_json(indent=2))
        return result
