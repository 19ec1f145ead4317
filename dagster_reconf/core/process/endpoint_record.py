"""Where a driver's control endpoint can be reached from another host: a record next to its checkpoint.

Why: a control plane on another host shares no files with the driver, only the stream's storage (an object store,
HDFS). So a driver whose spec names a storage URL publishes its endpoint's address and port there, under the
stream's own prefix, and withdraws it when it exits; the token is never written there (it comes from the
environment variable the spec names, :attr:`~dagster_reconf.core.spec.StreamSpec.control_token_env`, on both hosts).

The same prefix holds the *pause marker* a control plane on another host sets before it pauses the stream for a
reconfiguration and clears once it resumed it: a driver started while it is set (its host restarted in the middle
of the reconfiguration) starts paused, so the query never runs on a checkpoint the reconfiguration is changing.
That is what a supervisor on the same host does by starting a lost driver paused.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dagster_reconf.core.errors import ControlRequestError, SpecError
from dagster_reconf.core.process.control import ControlClient, read_token
from dagster_reconf.core.process.control_tls import client_context
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import storage_root
from dagster_reconf.core.store.storage import Location, write_whole

__all__ = [
    "MIN_TOKEN_CHARS",
    "ControlEndpoint",
    "check_remote_spec",
    "clear_pause_marker",
    "endpoint_file",
    "held_paused",
    "pause_marker",
    "publish_endpoint",
    "read_endpoint",
    "remote_client",
    "set_pause_marker",
    "stream_token",
    "token_from_env",
    "withdraw_endpoint",
]

MIN_TOKEN_CHARS = 32


class ControlEndpoint(BaseModel):
    """A running driver's control endpoint, as published for other hosts."""

    model_config = ConfigDict(extra="forbid")
    host: str = Field(description="The address it listens on (the spec's control_bind_address, or the host's name).")
    port: int = Field(ge=1, le=65535)
    pid: int = Field(ge=1, description="The driver process, on its own host.")
    driver_host: str = Field(description="The name of the driver's host.")
    started_at: float
    tls: bool = Field(False, description="Whether it speaks HTTPS only (the spec gives a certificate).")


def token_from_env(variable: str) -> str:
    """The control token held by environment variable ``variable``; a SpecError naming the fix if it is unset or
    short (a guessable token would open the driver to anyone who reaches its address)."""
    token = os.environ.get(variable, "").strip()
    if len(token) < MIN_TOKEN_CHARS:
        found = "is not set" if not token else f"holds {len(token)} characters"
        raise SpecError(
            f"control_token_env names ${variable}, which {found} on this host; set it to the same secret of "
            f"{MIN_TOKEN_CHARS} characters or more on the driver's host and the control plane's, e.g. "
            f"{variable}={secrets.token_urlsafe(32)}"
        )
    return token


def stream_token(spec: StreamSpec, token_file: Path) -> str:
    """The stream's control token: from the environment variable its spec names, else its token file."""
    return token_from_env(spec.control_token_env) if spec.control_token_env else read_token(token_file)


def endpoint_file(data_root: Location) -> Location:
    """Where the driver of the stream stored under ``data_root`` publishes its endpoint."""
    return data_root / "control" / "endpoint.json"


def pause_marker(data_root: Location) -> Location:
    """Set while a control plane on another host holds the stream paused for a reconfiguration."""
    return data_root / "control" / "paused.json"


def set_pause_marker(data_root: Location, reason: str) -> None:
    path = pause_marker(data_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps({"reason": reason, "at": time.time()}))


def held_paused(driver_info: dict[str, object]) -> str | None:
    """Why a driver that just started runs no query, from its record (``driver.json``): a control plane on another
    host held the stream paused when it started (None: not held)."""
    marker = driver_info.get("paused_by")
    if not marker:
        return None
    return (
        f"it is held paused: a control plane on another host paused it for a reconfiguration ({marker}); re-running "
        "that reconfiguration there resumes it"
    )


def clear_pause_marker(data_root: Location) -> None:
    path = pause_marker(data_root)
    if path.exists():
        path.unlink()


def publish_endpoint(data_root: Location, endpoint: ControlEndpoint) -> None:
    path = endpoint_file(data_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, endpoint.model_dump_json())


def withdraw_endpoint(data_root: Location, pid: int) -> None:
    """Remove the published endpoint if it is still driver ``pid``'s (a newer driver may have replaced it)."""
    path = endpoint_file(data_root)
    try:
        if ControlEndpoint.model_validate_json(path.read_text()).pid == pid:
            path.unlink()
    except (FileNotFoundError, ValidationError, ValueError):
        pass


def read_endpoint(data_root: Location) -> ControlEndpoint:
    """The endpoint published under ``data_root``; a ControlRequestError (409) saying why there is none."""
    path = endpoint_file(data_root)
    try:
        return ControlEndpoint.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise ControlRequestError(
            f"no control endpoint published at {path}: the stream's driver is not running (or started without "
            "this storage URL)",
            409,
        ) from None
    except (ValidationError, ValueError) as exc:
        raise ControlRequestError(f"the control endpoint record at {path} is damaged ({exc}); restart the driver", 409)


def check_remote_spec(spec: StreamSpec) -> None:
    """A SpecError unless ``spec`` lets a control plane on another host find its driver (a storage URL) and
    authenticate (a token variable)."""
    missing = [name for name in ("storage", "control_token_env") if getattr(spec, name) is None]
    if missing:
        raise SpecError(
            f"stream {spec.name!r} has no {' or '.join(missing)}: a control plane on another host finds the driver "
            "through the stream's storage URL and authenticates with the token in the environment variable "
            "control_token_env names; set both in the spec"
        )


def remote_client(spec: StreamSpec) -> ControlClient:
    """A client for the driver of ``spec`` on another host: its endpoint from the stream's storage, its token from
    the environment variable the spec names."""
    check_remote_spec(spec)
    assert spec.storage is not None and spec.control_token_env is not None
    endpoint = read_endpoint(storage_root(spec.storage, spec.name))
    tls = client_context(spec)
    if endpoint.tls != (tls is not None):
        raise ControlRequestError(
            f"the driver of {spec.name!r} serves {'HTTPS' if endpoint.tls else 'plain HTTP'} but this host's spec "
            f"{'gives no' if tls is None else 'gives a'} control_tls_cert: use the spec the driver runs with",
            409,
        )
    return ControlClient(endpoint.port, token_from_env(spec.control_token_env), endpoint.host, tls=tls)
