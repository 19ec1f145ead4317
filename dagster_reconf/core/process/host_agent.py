"""A driver host's agent: starts and stops stream drivers on its host for a control plane on another host, and
keeps them running, through the streams' storage only.

Why pull: the control plane and the driver host share nothing but the storage (an object store), and an agent that
listened would be one more port and secret to guard. So the control plane writes a :class:`HostRequest` to
``<storage>/streams/<name>/control/request.json`` and the agent, polling the streams it was started for (a request
for any other is never read), answers in ``answer.json`` beside it. Whoever may write under a stream's prefix may
already change its checkpoint: the agent gives them no more than that. It checks a requested spec as
``reconf stream start`` does, and also that it keeps the agent's storage and names a control token variable set on
this host, so no driver it starts answers another host without a token.

Like a service manager, it starts again a driver that died without being stopped (a crash, a kill, the host's
restart): paused where the pause marker is set, as every driver start is (:mod:`.endpoint_record`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dagster_reconf.core.errors import ReconfError, SpecError, StreamStartError
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths, storage_root
from dagster_reconf.core.store.storage import Location, spark_uri, validate_storage_url, write_whole

__all__ = ["HostAgent", "HostAnswer", "HostRequest", "ask_agent", "await_answer", "send_request"]

log = logging.getLogger(__name__)

POLL_S = 1.0
RESTART_BACKOFF_S = 30.0


class HostRequest(BaseModel):
    """What a control plane asks of the driver host's agent for one stream."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$")
    action: Literal["start", "stop"]
    spec: dict[str, Any] | None = Field(default=None, description="start: the spec to run (its registered one if None)")
    paused: bool = False
    requested_by: str
    requested_at: float


class HostAnswer(BaseModel):
    """The agent's answer to one request (``answer.json``), or its report of a driver it started again by itself
    (``restart.json``, ``request_id`` None)."""

    model_config = ConfigDict(extra="forbid")
    request_id: str | None
    action: Literal["start", "stop"] | None = Field(description="what was asked (None: a damaged request)")
    ok: bool
    message: str
    host: str
    pid: int | None = None
    answered_at: float


def request_file(data_root: Location) -> Location:
    return data_root / "control" / "request.json"


def answer_file(data_root: Location) -> Location:
    return data_root / "control" / "answer.json"


def restart_file(data_root: Location) -> Location:
    return data_root / "control" / "restart.json"


def send_request(
    storage: str, name: str, action: Literal["start", "stop"], spec: StreamSpec | None = None, paused: bool = False
) -> HostRequest:
    """Leave a request for the agent serving stream ``name`` under ``storage`` (a newer request replaces it)."""
    request = HostRequest(
        id=secrets.token_hex(8),
        action=action,
        spec=spec.model_dump(mode="json") if spec is not None else None,
        paused=paused,
        requested_by=socket.gethostname(),
        requested_at=time.time(),
    )
    path = request_file(storage_root(storage, name))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, request.model_dump_json())
    return request


def await_answer(storage: str, name: str, request: HostRequest, timeout_s: float) -> HostAnswer:
    """The agent's answer to ``request``.

    Raises:
        StreamStartError: the agent refused or failed it (its reason), or no agent answered in ``timeout_s``.
    """
    path = answer_file(storage_root(storage, name))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = _read_answer(path)
        if answer is not None and answer.request_id == request.id:
            if not answer.ok:
                raise StreamStartError(
                    f"the agent on {answer.host} could not {request.action} {name!r}: {answer.message}"
                )
            return answer
        time.sleep(POLL_S / 2)
    raise StreamStartError(
        f"no agent answered the request to {request.action} stream {name!r} within {timeout_s:g} s; run "
        f"`reconf agent --storage {storage} --stream {name}` on the driver's host"
    )


def ask_agent(
    storage: str,
    name: str,
    action: Literal["start", "stop"],
    timeout_s: float,
    spec: StreamSpec | None = None,
    paused: bool = False,
) -> HostAnswer:
    """Ask the agent serving stream ``name`` under ``storage`` to start (``spec``) or stop its driver; its answer.

    Raises:
        StreamStartError: the agent refused or failed it (its reason), or no agent answered in ``timeout_s``.
    """
    return await_answer(storage, name, send_request(storage, name, action, spec, paused), timeout_s)


class HostAgent:
    """Serves ``streams`` stored under ``storage``, with their drivers under runtime home ``home`` on this host."""

    def __init__(self, home: Path | str, storage: str, streams: list[str], start_timeout_s: float = 300.0) -> None:
        if not streams:
            raise SpecError("an agent serves the streams it is named: give at least one --stream NAME")
        self.supervisor = StreamSupervisor(home)
        try:
            self.storage = validate_storage_url(storage)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        self.streams = [StreamPaths(self.supervisor.home, name).name for name in streams]  # names checked
        self.start_timeout_s = start_timeout_s
        self._restarted_at: dict[str, float] = {}

    def serve(self, *, poll_s: float = POLL_S, until: Callable[[], bool] = lambda: False) -> None:
        """Answer requests and keep drivers running until ``until()`` is true (or the process is stopped)."""
        while not until():
            for answer in self.poll_once():
                log.info("%s", answer.model_dump_json())
            time.sleep(poll_s)

    def poll_once(self) -> list[HostAnswer]:
        """One look at every served stream: its new request answered, or its dead driver started again. A store
        that fails a read or write is tried again next time: the agent outlives the store's hiccups."""
        answers = []
        for name in self.streams:
            try:
                answers.extend(self._serve_stream(name))
            except Exception as exc:  # noqa: BLE001 - s3fs, botocore, an HDFS client: each raises its own
                log.warning("stream %s: its requests could not be read or answered this time: %s", name, exc)
        return answers

    def _serve_stream(self, name: str) -> list[HostAnswer]:
        """Its new request answered (``answer.json``), or its dead driver started again (``restart.json``)."""
        data_root = storage_root(self.storage, name)
        last = _read_answer(answer_file(data_root))
        request = self._new_request(data_root, last)
        if isinstance(request, HostAnswer):  # a damaged request, answered with why
            write_whole(answer_file(data_root), request.model_dump_json())
            return [request]
        if request is not None:
            answer = _answer(request.id, request.action, *self._carry_out(name, request))
            write_whole(answer_file(data_root), answer.model_dump_json())
            return [answer]
        if not self._should_restart(name, last):
            return []
        self._restarted_at[name] = time.monotonic()
        ok, message, pid = self._start(name, None, paused=False)
        message = f"its driver had died; {message} again" if ok else f"its driver had died: {message}"
        answer = _answer(None, "start", ok, message, pid)
        write_whole(restart_file(data_root), answer.model_dump_json())
        return [answer]

    def _should_restart(self, name: str, last: HostAnswer | None) -> bool:
        """A driver that died without a stop was asked for, not started again in the last ``RESTART_BACKOFF_S``
        (one that dies at every start is not started in a loop)."""
        if last is not None and last.action == "stop":
            return False
        if name in self._restarted_at and time.monotonic() - self._restarted_at[name] < RESTART_BACKOFF_S:
            return False
        return self.supervisor.driver_death(name) is not None

    @staticmethod
    def _new_request(data_root: Location, last: HostAnswer | None) -> HostRequest | HostAnswer | None:
        """The request not answered yet; an answer saying why where it is damaged (once per damaged text)."""
        try:
            text = request_file(data_root).read_text()
        except FileNotFoundError:
            return None
        try:
            request = HostRequest.model_validate_json(text)
        except (ValidationError, ValueError) as exc:
            damaged = "damaged-" + hashlib.sha256(text.encode()).hexdigest()[:16]
            if last is not None and last.request_id == damaged:
                return None
            problem = _one_line(str(exc))
            return _answer(damaged, None, False, f"{request_file(data_root)} is not a request ({problem})", None)
        return None if last is not None and request.id == last.request_id else request

    def _carry_out(self, name: str, request: HostRequest) -> tuple[bool, str, int | None]:
        if request.action == "stop":
            if not self.supervisor.paths(name).spec.is_file():
                return True, "not running", None
            report = self.supervisor.stop(name)
            return True, "stopped" if report.get("stopped") else "not running", None
        return self._start(name, request.spec, paused=request.paused)

    def _start(self, name: str, fields: dict[str, Any] | None, paused: bool) -> tuple[bool, str, int | None]:
        try:
            spec = self._checked_spec(name, fields)
            running = self.supervisor.driver_info(name)
            if running is not None:
                kept = json.loads(self.supervisor.paths(name).spec.read_text())
                if kept == spec.model_dump(mode="json"):
                    return True, "already running with this spec", running.get("pid")
                return False, "a driver of it runs with another spec: stop it first, or reconfigure it", None
            info = self.supervisor.start(spec, timeout_s=self.start_timeout_s, paused=paused)
        except (ReconfError, OSError) as exc:
            return False, _one_line(str(exc)), None
        return True, "started paused" if paused else "started", info.get("pid")

    def _checked_spec(self, name: str, fields: dict[str, Any] | None) -> StreamSpec:
        if fields is None:  # the spec its driver kept
            return StreamSpec.parse(json.loads(self.supervisor.require(name).spec.read_text()))
        spec = StreamSpec.parse(fields)
        if spec.name != name:
            raise SpecError(f"the request under stream {name!r}'s prefix asks for stream {spec.name!r}")
        mine = spark_uri(storage_root(self.storage, name))
        if spec.storage is None or spark_uri(storage_root(spec.storage, name)) != mine:
            raise SpecError(
                f"the spec's storage {spec.storage!r} is not this agent's ({self.storage}): an agent starts only "
                "streams whose data it serves"
            )
        if spec.control_token_env is None:
            raise SpecError("the spec names no control_token_env: a driver started for another host needs a token")
        return spec


def _one_line(text: str, limit: int = 600) -> str:
    """An error for the answer file: whole where short (a spec's every problem), cut where long (a driver's log)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _read_answer(path: Location, attempts: int = 3) -> HostAnswer | None:
    """The answer file's answer (None: none yet, or not readable as one). The agent rewrites the file whole while
    others poll it: an object store that saw it replaced between a read's first and next request refuses the read
    (S3's ``PreconditionFailed`` on the ETag it started with), and the read starts over on the new answer."""
    for _ in range(attempts):
        try:
            return HostAnswer.model_validate_json(path.read_text())
        except (FileNotFoundError, ValidationError, ValueError):
            return None
        except OSError as exc:
            if "precondition" not in str(exc).lower():
                raise
    return None


def _answer(
    request_id: str | None, action: Literal["start", "stop"] | None, ok: bool, message: str, pid: int | None
) -> HostAnswer:
    return HostAnswer(
        request_id=request_id,
        action=action,
        ok=ok,
        message=message,
        host=socket.gethostname(),
        pid=pid,
        answered_at=time.time(),
    )
