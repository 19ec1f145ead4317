"""The driver's control endpoint: its operations, their request models, and the client (the server is
:mod:`dagster_reconf.core.process.control_server`).

Chi's idea, on Spark: the controller talks to the running job. The endpoint lives in
the driver process next to the query, so a stop or a settings change reuses the warm
SparkContext and executors.

Security and validation: the server binds to 127.0.0.1 unless the stream's spec names
another address (``control_bind_address``: Dagster run workers on another host); every request must carry
``Authorization: Bearer <token>`` where the token is the stream's secret file (mode
0600, readable only by the user who started the stream). Bodies are validated with
pydantic (unknown fields refused). A refused request changes nothing and answers
``{"error": "..."}`` with 400 (malformed), 401 (token), 404 (path), 409 (state) or
413 (too large); a failure the handler did not expect (Spark's own, a lost JVM) answers 500
with its type and first line, its traceback in the driver's log, so a client never sees a
connection closed without a reply.

Endpoints (all under ``/v1``): ``GET status``, ``POST stop`` (stop the query at a
batch boundary, driver stays up), ``POST start``, ``POST restart`` (new settings),
``POST shutdown`` (stop the query and the driver), and for reconfigurations of a
stopped query (:mod:`dagster_reconf.core.spark.state_migrator`): ``POST state`` (state
rows and checksums), ``POST states`` (several such reads in one Spark job), ``POST code-check`` (state schema
compatibility of a code
version), ``POST migrate`` (state partitions), ``POST precopy`` (a repartitioned copy prepared while
the query runs), ``POST executors`` (more executors, ahead of a cores change), ``POST rollback-replay`` and
``POST resume`` (start with new settings); for a handover to a warm standby driver
(:mod:`dagster_reconf.core.process.driver`), ``POST promote`` (the standby) and ``POST retire``
(the paused old driver); ``POST metrics`` (the metrics store's records after a cursor, for a
control plane on another host: :mod:`dagster_reconf.core.process.metrics_mirror`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dagster_reconf.core.errors import (
    ControlRequestError,
    format_validation_error,
)

__all__ = [
    "OPERATIONS",
    "CodeCheckRequest",
    "ControlClient",
    "ExecutorsRequest",
    "Operation",
    "MetricsRequest",
    "MigrateRequest",
    "PrecopyRequest",
    "RestartRequest",
    "ResumeRequest",
    "RollbackReplayRequest",
    "StateRequest",
    "StatesRequest",
    "StopRequest",
    "log_tail",
    "new_token",
    "read_token",
    "routes",
]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_REQUEST_TIMEOUT_S = 300.0
BUSY_RETRY_FIRST_S, BUSY_RETRY_MAX_S = 0.05, 1.0  # a 503 (slots taken) or a 409 (an operation in flight) asked again
IN_FLIGHT_WAIT_S = 300.0  # the longest a request waits for another mutating operation to finish (a migration's)
STATUS_TIMEOUT_S = 10.0  # a driver answers status beside any operation: longer, it is stopped or starved


class StopRequest(BaseModel):
    """Body of ``POST /v1/stop`` and ``POST /v1/shutdown``."""

    model_config = ConfigDict(extra="forbid")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="How long to wait for the running batch to commit.")
    finish: bool = Field(
        True,
        description="Finish an interrupted batch before answering (False: the next driver "
        "finishes it, after a handover).",
    )
    keep_interrupted: bool = Field(
        False,
        description="With finish false: leave an interrupted batch planned even where "
        "no sink saw it (else its plan is dropped), so the next start runs "
        "it first, at the size it was planned with.",
    )

    @model_validator(mode="after")
    def _keep_only_unfinished(self) -> "StopRequest":
        if self.finish and self.keep_interrupted:
            raise ValueError("keep_interrupted=true needs finish=false: a finished batch is committed, not kept")
        return self


class StartRequest(BaseModel):
    """Body of ``POST /v1/start`` (no fields)."""

    model_config = ConfigDict(extra="forbid")


class RestartRequest(BaseModel):
    """Body of ``POST /v1/restart``: spec fields to change, e.g. ``{"source_partitions": 4}``."""

    model_config = ConfigDict(extra="forbid")
    settings: dict[str, Any] = Field(..., min_length=1, description="Spec fields and their new values.")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="How long to wait for the running batch to commit.")


class StateRequest(BaseModel):
    """Body of ``POST /v1/state``: which checkpoint generation and batch to summarize."""

    model_config = ConfigDict(extra="forbid")
    generation: int | None = Field(None, ge=0, description="Checkpoint generation (default: the one in force).")
    batch_id: int | None = Field(None, ge=0, description="Batch whose state to read (default: the last committed).")


class StatesRequest(BaseModel):
    """Body of ``POST /v1/states``: several state reads, answered from one Spark job (a verification's before and
    after)."""

    model_config = ConfigDict(extra="forbid")
    reads: list[StateRequest] = Field(..., min_length=1, max_length=16)


class CodeCheckRequest(BaseModel):
    """Body of ``POST /v1/code-check``."""

    model_config = ConfigDict(extra="forbid")
    code_version: str = Field(..., min_length=1, max_length=64, description="The code version to check.")


class MigrateRequest(BaseModel):
    """Body of ``POST /v1/migrate``."""

    model_config = ConfigDict(extra="forbid")
    state_partitions: int = Field(..., ge=1, le=10_000, description="Target state partitions.")
    strategy: str = Field(
        "native",
        pattern="^(native|replay|precopy)$",
        description="native (Spark's repartition), replay, or precopy (finish a prepared copy).",
    )


class PrecopyRequest(BaseModel):
    """Body of ``POST /v1/precopy``: prepare a repartitioned copy of the running stream's checkpoint."""

    model_config = ConfigDict(extra="forbid")
    state_partitions: int = Field(..., ge=1, le=10_000, description="Target state partitions.")
    close_enough: int | None = Field(
        None, ge=0, le=100, description="Batches behind the stream where the catch-up rounds stop (default 2)."
    )
    merge: bool = Field(False, description="Replay each round's batches as one (only for operators that merge).")


class ExecutorsRequest(BaseModel):
    """Body of ``POST /v1/executors``: grow the running stream to this many executors (within its cores_ceiling)."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(..., ge=1, le=100_000, description="Executors to hold.")


class RollbackReplayRequest(BaseModel):
    """Body of ``POST /v1/rollback-replay``."""

    model_config = ConfigDict(extra="forbid")
    generation: int = Field(..., ge=0, description="The checkpoint generation to return to.")


class ResumeRequest(BaseModel):
    """Body of ``POST /v1/resume``: spec fields to apply as the stopped query starts again."""

    model_config = ConfigDict(extra="forbid")
    settings: dict[str, Any] = Field(default_factory=dict, description="Spec fields and their new values.")


class MetricsRequest(BaseModel):
    """Body of ``POST /v1/metrics``: the driver's metrics records after a cursor (a control plane on another host)."""

    model_config = ConfigDict(extra="forbid")
    cursor: int | None = Field(None, ge=0, description="Offset into the store's history to read from (None: recent).")
    max_bytes: int = Field(1 << 20, ge=1024, le=16 << 20, description="The most of the store's bytes one answer holds.")
    source: str | None = Field(
        None, max_length=4096, description="The store the cursor points into; another store is read from its tail."
    )


@dataclass(frozen=True)
class Operation:
    """One operation of a driver's control endpoint: ``METHOD /v1/<name>`` with its request body's model."""

    name: str
    method: str
    request: type[BaseModel] | None


# Every operation, declared once: the server's routes, the driver's handlers and the client all read this table.
OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("status", "GET", None),
        Operation("stop", "POST", StopRequest),
        Operation("start", "POST", StartRequest),
        Operation("restart", "POST", RestartRequest),
        Operation("shutdown", "POST", StopRequest),
        Operation("state", "POST", StateRequest),
        Operation("states", "POST", StatesRequest),
        Operation("code-check", "POST", CodeCheckRequest),
        Operation("migrate", "POST", MigrateRequest),
        Operation("precopy", "POST", PrecopyRequest),
        Operation("executors", "POST", ExecutorsRequest),
        Operation("rollback-replay", "POST", RollbackReplayRequest),
        Operation("resume", "POST", ResumeRequest),
        Operation("promote", "POST", StartRequest),
        Operation("retire", "POST", StartRequest),
        Operation("metrics", "POST", MetricsRequest),
    )
}


def new_token(path: Path) -> str:
    """Create a fresh random token file readable only by its owner (mode 0600)."""
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    return token


def read_token(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise ControlRequestError(f"token file {path} is missing; is the stream started?", 401) from None


Handler = Callable[[Any], dict[str, Any]]
Routes = dict[tuple[str, str], tuple[type[BaseModel] | None, Handler]]


def routes(handlers: Mapping[str, Handler]) -> Routes:
    """The server's routes for a handler per operation of :data:`OPERATIONS` (by name).

    Raises:
        ValueError: an operation without a handler, or a handler for no operation.
    """
    missing, unknown = sorted(set(OPERATIONS) - set(handlers)), sorted(set(handlers) - set(OPERATIONS))
    if missing or unknown:
        raise ValueError(f"control handlers must match the operations: missing {missing}, unknown {unknown}")
    return {(op.method, f"/v1/{name}"): (op.request, handlers[name]) for name, op in OPERATIONS.items()}


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address, bracketed in a URL


def log_tail(path: Path, lines: int = 30, *, without_stack_frames: bool = False) -> str:
    """The last ``lines`` lines of a driver's log (JVM stack frames left out on request: the errors stay readable)."""
    if not path.exists():
        return "(no driver log)"
    text = path.read_text(errors="replace").splitlines()
    if without_stack_frames:
        text = [line for line in text if line.strip() and not line.lstrip().startswith(("at ", "..."))]
    return "\n".join(text[-lines:])


class ControlClient:
    """Talks to one driver's control endpoint.

    Args:
        log: the driver's log; when the endpoint cannot be reached (the driver died or dropped
            the request), the error carries the log's last lines.
        tls: where given, HTTPS, the certificate verified with it
            (:func:`~dagster_reconf.core.process.control_tls.client_context`).
    """

    def __init__(
        self, port: int, token: str, host: str = LOOPBACK, log: Path | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.base = f"{'https' if tls else 'http'}://{_url_host(host)}:{port}/v1"
        self.token = token
        self.log = log
        self.tls = tls

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> dict[str, Any]:
        """One request, answered within ``timeout_s``.

        A driver that answers 503 (every connection slot taken) is asked again, ever less often, until ``timeout_s``
        has passed. One that answers that another mutating operation is still running (a re-run right after its
        caller was killed: the killed run's request still runs in the driver) is waited for the same way, at most
        :data:`IN_FLIGHT_WAIT_S` and within ``timeout_s``, with a warning that says so; then the refusal is raised.
        """
        started = time.monotonic()
        deadline = started + timeout_s
        pause, warned = BUSY_RETRY_FIRST_S, False
        while True:
            try:
                return self._request_once(method, path, body, max(deadline - time.monotonic(), 0.1))
            except ControlRequestError as exc:
                now = time.monotonic()
                waits = exc.busy or (exc.in_flight is not None and now - started < IN_FLIGHT_WAIT_S)
                if not waits or deadline - now <= pause:
                    if exc.in_flight is not None and warned:
                        raise ControlRequestError(f"{exc} (waited {now - started:.0f} s for it)", exc.status) from None
                    raise
                if exc.in_flight is not None and not warned:
                    bound = min(IN_FLIGHT_WAIT_S, deadline - now)
                    logger.warning(
                        "%s %s waits up to %.0f s for the driver's operation in flight: %s", method, path, bound, exc
                    )
                    warned = True
            time.sleep(pause)
            pause = min(pause * 2, BUSY_RETRY_MAX_S)

    def _request_once(self, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base}/{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=self.tls) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                reply = json.loads(exc.read())
            except (json.JSONDecodeError, AttributeError):
                reply = None
            if not isinstance(reply, dict):
                reply = {}
            in_flight = reply.get("in_flight") if exc.code == 409 else None
            raise ControlRequestError(
                str(reply.get("error", exc.reason)),
                exc.code,
                busy=exc.code == 503,
                in_flight=str(in_flight) if in_flight else None,
            ) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                message = (
                    f"the driver does not answer: control endpoint {self.base} gave no reply within {timeout_s:.3g} s "
                    "(stopped, e.g. by SIGSTOP, or starved of CPU or memory)"
                )
            else:
                message = f"control endpoint {self.base} unreachable: {reason}"
            if self.log is not None and self.log.exists():
                message += f"; the driver's log ({self.log}) ends:\n{log_tail(self.log, 12, without_stack_frames=True)}"
            raise ControlRequestError(message, 503) from None

    def call(
        self, name: str, fields: Mapping[str, Any] | None = None, wait_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> dict[str, Any]:
        """Operation ``name`` of :data:`OPERATIONS` with its request's ``fields``, validated here first (a field left
        at its default is not sent: the driver applies the same default); waits at most ``wait_s`` for the answer.

        Raises:
            ControlRequestError: a bad field (400, before anything is sent), or the driver's refusal or absence.
        """
        op = OPERATIONS[name]
        body = None
        if op.request is not None:
            try:
                body = op.request.model_validate(fields or {}).model_dump(mode="json", exclude_defaults=True)
            except ValidationError as exc:
                raise ControlRequestError(format_validation_error(f"{name} request", exc, fields), 400) from None
        return self.request(op.method, name, body, wait_s)

    def status(self) -> dict[str, Any]:
        """The driver's status; a driver that gives none within :data:`STATUS_TIMEOUT_S` is reported (503)."""
        return self.call("status", wait_s=STATUS_TIMEOUT_S)

    def stop(self, timeout_s: float = 120.0, finish: bool = True, keep_interrupted: bool = False) -> dict[str, Any]:
        fields = {"timeout_s": timeout_s, "finish": finish, "keep_interrupted": keep_interrupted}
        return self.call("stop", fields, timeout_s + 30)

    def start(self) -> dict[str, Any]:
        return self.call("start")

    def restart(self, settings: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        return self.call("restart", {"settings": settings, "timeout_s": timeout_s}, timeout_s + 120)

    def shutdown(self, timeout_s: float = 120.0) -> dict[str, Any]:
        return self.call("shutdown", {"timeout_s": timeout_s}, timeout_s + 30)

    def state(self, generation: int | None = None, batch_id: int | None = None) -> dict[str, Any]:
        return self.call("state", {"generation": generation, "batch_id": batch_id})

    def states(self, reads: list[tuple[int | None, int | None]]) -> list[dict[str, Any]]:
        return self.call("states", {"reads": [{"generation": g, "batch_id": b} for g, b in reads]})["summaries"]

    def code_check(self, code_version: str) -> dict[str, Any]:
        return self.call("code-check", {"code_version": code_version})

    def metrics(self, cursor: int | None = None, max_bytes: int = 1 << 20, source: str | None = None) -> dict[str, Any]:
        """``records`` after ``cursor`` into store ``source`` (at most ``max_bytes`` of the store), the ``cursor`` to
        read on from and the store's ``source``, and whether records were ``skipped`` (the cursor was further back,
        or into another store)."""
        return self.call("metrics", {"cursor": cursor, "max_bytes": max_bytes, "source": source})

    def migrate(self, state_partitions: int, strategy: str) -> dict[str, Any]:
        return self.call("migrate", {"state_partitions": state_partitions, "strategy": strategy}, 3600)

    def precopy(self, state_partitions: int, close_enough: int | None = None, merge: bool = False) -> dict[str, Any]:
        body = {"state_partitions": state_partitions, "close_enough": close_enough, "merge": merge}
        return self.call("precopy", body, 3600)

    def rollback_replay(self, generation: int) -> dict[str, Any]:
        return self.call("rollback-replay", {"generation": generation})

    def add_executors(self, count: int) -> dict[str, Any]:
        return self.call("executors", {"count": count}, 600)

    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        return self.call("resume", {"settings": settings})
