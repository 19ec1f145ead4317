"""How many more executors a standalone master can place: checked before a reconfiguration asks for them.

Why: a standalone master places an executor only on a worker with ``spark.executor.cores``
free cores *and* ``spark.executor.memory`` free memory. When none has, the application just
waits, with no error anywhere, and a cores change runs on fewer executors than it planned.
The master's ``/json/`` page says what each worker has free, so a shortfall is found
before anything is touched and named with its cause (cores or memory) and the fix.

The master's web UI is found from the cluster ``reconf cluster start`` recorded under the
runtime home, else at Spark's default port (8080) on the master's host. A master whose UI
answers at neither is not checked (``None``): its shortfall shows when executors do not come.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.store.cluster_record import cluster_info

__all__ = [
    "DEFAULT_EXECUTOR_MEMORY",
    "WorkerRoom",
    "executor_memory_mb",
    "executor_room_problem",
    "granted_cores",
    "launched_executors",
    "master_ui",
    "size_mb",
    "worker_rooms",
]

DEFAULT_MASTER_UI_PORT = 8080
DEFAULT_EXECUTOR_MEMORY = "1g"  # spark.executor.memory's default

_UNITS_MB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024, "": 1}


def size_mb(value: str, what: str = "size") -> int:
    """MiB of a Spark memory size (``512m``, ``2g``; a bare number is MiB, as Spark reads executor and worker memory).

    Raises:
        SpecError: not a size.
    """
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", value.strip().lower())
    if match is None:
        raise SpecError(f"{what} {value!r} is not a size; use e.g. 512m or 2g")
    return max(1, int(int(match.group(1)) * _UNITS_MB[match.group(2)]))


@dataclass(frozen=True)
class WorkerRoom:
    """What one alive worker has free."""

    worker: str
    cores_free: int
    memory_free_mb: int

    def executors(self, cores: int, memory_mb: int) -> int:
        """Executors of ``cores`` cores and ``memory_mb`` MiB that fit in what is free."""
        return min(self.cores_free // cores, self.memory_free_mb // memory_mb)


def executor_memory_mb(value: str | None) -> int:
    """MiB of a ``spark.executor.memory`` value (``512m``, ``1g``; None: Spark's default 1g)."""
    return size_mb(value or DEFAULT_EXECUTOR_MEMORY, "executor memory")


def master_ui(master: str, home: Path | None = None) -> str | None:
    """The web UI of standalone master ``master`` (``spark://HOST:PORT``), or None where none answers."""
    match = re.fullmatch(r"spark://([^:/,]+):(\d+)", master)
    if match is None:  # local, k8s, yarn, or a standalone HA list: not checked
        return None
    recorded = cluster_info(home) if home is not None else None
    candidates = [recorded.master_ui] if recorded is not None and recorded.master_url == master else []
    candidates.append(f"http://{match.group(1)}:{DEFAULT_MASTER_UI_PORT}")
    for url in candidates:
        if _master_state(url) is not None:
            return url
    return None


def _master_state(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/json/", timeout=3) as resp:
            state = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and "workers" in state else None


def worker_rooms(url: str) -> list[WorkerRoom] | None:
    """What each alive worker of the master whose UI is at ``url`` has free; None where it does not answer."""
    state = _master_state(url)
    if state is None:
        return None
    return [
        WorkerRoom(f"{w.get('host')}:{w.get('port')}", int(w.get("coresfree", 0)), int(w.get("memoryfree", 0)))
        for w in state["workers"]
        if w.get("state") == "ALIVE"
    ]


def launched_executors(
    master: str, home: Path, app_id: str, executor_cores: int | None
) -> Callable[[], int | None] | None:
    """How many executors the standalone master has launched for application ``app_id`` (None where its UI is not
    found): what settling a new context's executors waits for."""
    url = master_ui(master, home)
    if url is None or executor_cores is None:
        return None

    def launched() -> int | None:
        granted = granted_cores(url, app_id)
        return None if granted is None else granted // executor_cores

    return launched


def granted_cores(url: str, app_id: str) -> int | None:
    """Cores the master at ``url`` has granted application ``app_id``: those of every executor it launched, registered
    with the driver or not yet; None where the master does not answer or does not list the application."""
    state = _master_state(url)
    apps = [a for a in (state or {}).get("activeapps", []) if a.get("id") == app_id]
    return int(apps[0].get("cores", 0)) if apps else None


def executor_room_problem(
    master: str, more: int, *, executor_cores: int, executor_memory: str | None, home: Path | None = None
) -> str | None:
    """Why ``master`` cannot place ``more`` executors of this size now, or None (they fit, or it cannot be told)."""
    if more <= 0:
        return None
    url = master_ui(master, home)
    rooms = worker_rooms(url) if url is not None else None
    if rooms is None:
        return None
    memory_mb = executor_memory_mb(executor_memory)
    fit = sum(room.executors(executor_cores, memory_mb) for room in rooms)
    if fit >= more:
        return None
    free = (
        "; ".join(f"worker {r.worker}: {r.cores_free} cores, {r.memory_free_mb} MiB free" for r in rooms)
        or "no alive worker"
    )
    return (
        f"standalone master {master} has room for {fit} more executor(s) of {executor_cores} core(s) and "
        f"{memory_mb} MiB, not the {more} this change adds ({free}); give the workers more cores or memory "
        "(`reconf cluster start --cores N --memory SIZE`, or SPARK_WORKER_CORES / SPARK_WORKER_MEMORY), lower "
        "executor_memory, or plan fewer cores"
    )
