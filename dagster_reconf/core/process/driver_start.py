"""What a driver's start checks and gives it: a reachable master, writable folders, its environment.

Checked before any process is spawned, so a start that cannot work fails with the setting to fix, not with a driver
that dies in its log.
"""

from __future__ import annotations

import os
import socket
import sys

from dagster_reconf.core.definition import entrypoint_root
from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.storage import Location

__all__ = ["MASTER_CONNECT_TIMEOUT_S", "check_master_reachable", "check_writable", "driver_environment"]

MASTER_CONNECT_TIMEOUT_S = 3.0


def check_master_reachable(master: str) -> None:
    """For ``spark://`` masters, fail fast with a clear message if no master listens."""
    if not master.startswith("spark://"):
        return
    errors = []
    for hostport in master[len("spark://") :].split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=MASTER_CONNECT_TIMEOUT_S):
                return
        except OSError as exc:
            errors.append(f"{hostport}: {exc.strerror or exc}")
    raise StreamStartError(
        f"no Spark master reachable at {master} ({'; '.join(errors)}); start one with `reconf cluster start` "
        "or fix the master URL"
    )


def driver_environment(spec: StreamSpec) -> dict[str, str]:
    """The driver's environment: this interpreter for Python workers, the entrypoint's import root on the path."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    if spec.driver_bind_address not in ("0.0.0.0", "::"):
        env["SPARK_LOCAL_IP"] = spec.driver_bind_address
    root = entrypoint_root(spec.entrypoint)
    paths = [str(root)] if root is not None else []
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in paths]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def check_writable(directory: Location, what: str) -> None:
    """Fail with the fix where ``directory`` (the home, a checkpoint or event log location) cannot be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except Exception as exc:  # OSError locally; fsspec backends raise their own
        raise SpecError(
            f"{what} directory {directory} is not writable ({getattr(exc, 'strerror', None) or exc}); choose "
            "another home (--home, RECONF_HOME) or another storage URL in the spec"
        ) from None
