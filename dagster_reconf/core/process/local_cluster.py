"""Start and stop a real Spark standalone cluster on 127.0.0.1 from the pyspark package.

Why: local mode runs executors inside the driver's JVM, which hides everything that
differs on a real cluster (separate executor JVMs, executor loss, state store reloads
on another executor). A standalone master and workers from ``bin/spark-class`` give
the real thing on one machine, bound to loopback only.

The cluster's pids and URLs live in ``<home>/cluster/cluster.json``; the processes run
in their own sessions and are found and stopped again from that file.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyspark

from dagster_reconf.core.errors import SpecError, StreamStartError, StreamStateError
from dagster_reconf.core.process.process_tree import terminate_process_tree
from dagster_reconf.core.spark.executor_room import size_mb
from dagster_reconf.core.store.cluster_record import ClusterInfo, cluster_info, cluster_record_file
from dagster_reconf.core.store.paths import default_home

__all__ = ["alive_workers", "daemon_env", "master_args", "spark_class", "start_cluster", "stop_cluster", "worker_args"]

LOOPBACK = "127.0.0.1"
DEFAULT_START_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def spark_class() -> Path:
    """pyspark's ``bin/spark-class``, which starts Spark's daemons."""
    script = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not script.exists():
        raise StreamStartError(f"{script} not found: this pyspark install has no bin/spark-class")
    return script


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [str(spark_class()), *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )


def alive_workers(master_ui: str) -> int:
    """Workers the master at ``master_ui`` has registered (-1: it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"{master_ui}/json/", timeout=2) as resp:
            state = json.loads(resp.read())
    except (OSError, ValueError):
        return -1
    return int(state.get("aliveworkers", 0))


def daemon_env(directory: Path, host: str) -> dict[str, str]:
    """The environment of a master or worker bound to ``host``, with its logs and work under ``directory``."""
    return {
        **os.environ,
        "SPARK_LOCAL_IP": host,
        "SPARK_LOG_DIR": str(directory / "logs"),
        "SPARK_WORKER_DIR": str(directory / "work"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
    }


def master_args(host: str, port: int, ui_port: int) -> list[str]:
    """``spark-class`` arguments of a standalone master listening on ``host``."""
    return ["org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port), "--webui-port", str(ui_port)]


def worker_args(master_url: str, host: str, cores: int, memory: str, ui_port: int, work_dir: Path) -> list[str]:
    """``spark-class`` arguments of a worker on ``host`` offering ``cores`` and ``memory`` to ``master_url``."""
    return [
        "org.apache.spark.deploy.worker.Worker",
        master_url,
        "--host",
        host,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--webui-port",
        str(ui_port),
        "--work-dir",
        str(work_dir),
    ]


def start_cluster(
    home: Path | None = None,
    *,
    workers: int = 1,
    cores_per_worker: int = 2,
    memory_per_worker: str | None = None,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> ClusterInfo:
    """Start a master and ``workers`` workers on 127.0.0.1 and wait until all are registered.

    ``memory_per_worker`` (a Spark size, e.g. ``3g``) defaults to 1g per core: an executor of Spark's default
    1g on each core. With less, a worker runs out of memory before cores and executors wait for room.

    Raises:
        SpecError: bad sizes.
        StreamStateError: a cluster is already running under ``home``.
        StreamStartError: it did not come up in time (everything started is stopped again).
    """
    if workers < 1 or cores_per_worker < 1:
        raise SpecError(f"workers ({workers}) and cores_per_worker ({cores_per_worker}) must be >= 1")
    memory_per_worker = memory_per_worker or f"{cores_per_worker}g"
    size_mb(memory_per_worker, "memory_per_worker")  # a bad size fails here, not in a worker's log
    home = (home or default_home()).resolve()
    if cluster_info(home) is not None:
        raise StreamStateError(f"a cluster is already running under {home}; stop it with `reconf cluster stop`")
    directory = home / "cluster"
    directory.mkdir(parents=True, exist_ok=True)
    env = daemon_env(directory, LOOPBACK)
    port, ui_port = _free_port(), _free_port()
    master_url, master_ui = f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui_port}"
    master = _spawn(
        master_args(LOOPBACK, port, ui_port),
        directory / "master.log",
        env,
    )
    started = [master]
    info = ClusterInfo(master_url, master_ui, master.pid, [], str(directory))
    try:
        deadline = time.monotonic() + timeout_s
        while alive_workers(master_ui) < 0:
            _check_running(started, deadline, directory)
        for k in range(workers):
            worker = _spawn(
                worker_args(
                    master_url, LOOPBACK, cores_per_worker, memory_per_worker, _free_port(), directory / "work"
                ),
                directory / f"worker-{k}.log",
                env,
            )
            started.append(worker)
            info.worker_pids.append(worker.pid)
        while alive_workers(master_ui) < workers:
            _check_running(started, deadline, directory)
    except BaseException:
        for proc in started:
            terminate_process_tree(proc.pid)
        raise
    cluster_record_file(home).write_text(json.dumps(asdict(info), indent=2))
    return info


def _check_running(procs: list[subprocess.Popen[bytes]], deadline: float, directory: Path) -> None:
    for proc in procs:
        if proc.poll() is not None:
            raise StreamStartError(f"a cluster process exited with code {proc.returncode}; see logs in {directory}")
    if time.monotonic() > deadline:
        raise StreamStartError(f"the cluster did not come up in time; see logs in {directory}")
    time.sleep(0.3)


def stop_cluster(home: Path | None = None) -> dict[str, Any]:
    """Stop the workers, then the master, recorded under ``home``."""
    home = (home or default_home()).resolve()
    path = cluster_record_file(home)
    if not path.exists():
        return {"stopped": False, "reason": f"no cluster recorded under {home}"}
    info = ClusterInfo(**json.loads(path.read_text()))
    for pid in [*info.worker_pids, info.master_pid]:
        terminate_process_tree(pid)
    path.unlink()
    return {"stopped": True, "master_url": info.master_url}
