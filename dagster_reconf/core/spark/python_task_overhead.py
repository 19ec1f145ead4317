"""PySpark's own CPU per Python task on this machine: measured once, kept in the user's cache.

Every task of a stage that runs Python pays a worker round trip whatever its data: the
worker reads and unpickles the task's function, opens its Arrow streams, reports its
metrics; and a task costs more in a worker that imported more. A stream's
batches of one configuration all run the same tasks, so their CPU cannot tell that from
CPU per event (see ``scaling.profile``); this figure is the part of it PySpark itself costs,
measured in workers that imported the stream's own module first, a floor the profile charges
per task.

Only the Python workers under this driver can be measured: local mode (see
:mod:`dagster_reconf.core.spark.python_worker_cpu`). The figure is kept in ``dagster-reconf/python-task-cpu.json`` under
the user's cache (``$XDG_CACHE_HOME``, else ``~/.cache``) with the facts it depends on (host,
CPUs, Python, PySpark) per set of modules, so drivers measure it once per machine and stream
code, whatever their home, and never in a reconfiguration's pause.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import socket
import statistics
import sys
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from dagster_reconf.core.spark.python_worker_cpu import python_worker_cpu_s
from dagster_reconf.core.store.atomic import replace_text

__all__ = ["kept_python_task_cpu_ms", "kept_python_task_cpu_path", "measure_python_task_cpu_ms", "same_batches"]

MEASURED_ROUNDS = 3  # after one that starts the workers
TASKS_PER_CPU = 4  # a round's tasks (at most 16): 2 tasks in 2 rounds read 30-62 ms across drivers on this machine,
# 8 tasks in 3 rounds 48.75 ms twice in a row


def measure_python_task_cpu_ms(
    spark: SparkSession, tasks: int, modules: Sequence[str] = (), rounds: int = MEASURED_ROUNDS
) -> float | None:
    """The Python workers' CPU milliseconds per task of a trivial ``mapInArrow`` job of ``tasks`` tasks (median of
    ``rounds``, after a round that starts the workers and imports ``modules`` in them, as the stream's tasks would);
    None where none ran under this process (not local mode)."""
    if tasks < 1 or rounds < 1:
        raise ValueError(f"a Python task CPU measurement needs tasks >= 1 and rounds >= 1, got {tasks} and {rounds}")
    frame = spark.range(0, 64 * tasks, numPartitions=tasks)
    job = (
        frame.mapInArrow(partial(same_batches, modules=tuple(modules)), frame.schema)
        .write.format("noop")
        .mode("overwrite")
    )
    job.save()
    per_task = []
    for _ in range(rounds):
        before = python_worker_cpu_s()
        job.save()
        per_task.append(1000.0 * (python_worker_cpu_s() - before) / tasks)
    measured = round(statistics.median(per_task), 3)
    return measured if measured > 0 else None


def kept_python_task_cpu_path() -> Path:
    """Where this machine's figures are kept: ``dagster-reconf/python-task-cpu.json`` in the user's cache."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dagster-reconf" / "python-task-cpu.json"


def kept_python_task_cpu_ms(spark: SparkSession, modules: Sequence[str] = (), path: Path | None = None) -> float | None:
    """:func:`measure_python_task_cpu_ms` on this machine with ``modules``, from ``path`` (default:
    :func:`kept_python_task_cpu_path`) where it was measured with the same facts, else measured now and kept there
    (where it can be written); None where it cannot be measured (then nothing is kept)."""
    path = path or kept_python_task_cpu_path()
    facts, key = _machine_facts(), ",".join(modules)
    known = _kept_figures(path, facts)
    if key in known:
        return known[key]
    measured = measure_python_task_cpu_ms(
        spark, tasks=min(max(TASKS_PER_CPU * (os.cpu_count() or 1), 4), 16), modules=modules
    )
    if measured is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_text(path, json.dumps({"facts": facts, "ms": {**known, key: measured}}))
        except OSError:
            pass  # a cache that cannot be written (a read-only home): the next driver measures again
    return measured


def _kept_figures(path: Path, facts: dict[str, Any]) -> dict[str, float]:
    """The figures kept at ``path`` by module set, where measured with ``facts``; none where absent or unreadable."""
    try:
        kept = json.loads(path.read_text())
        if isinstance(kept, dict) and kept.get("facts") == facts and isinstance(kept.get("ms"), dict):
            return {str(k): float(v) for k, v in kept["ms"].items()}
    except (OSError, ValueError, TypeError):
        pass
    return {}


def _machine_facts() -> dict[str, Any]:
    """What PySpark's CPU per task depends on: another host, CPU count, Python or PySpark measures it again."""
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "pyspark": pyspark.__version__,
    }


def same_batches(batches: Iterable[Any], modules: tuple[str, ...] = ()) -> Iterator[Any]:
    """Arrow batches through a Python worker, unchanged, after importing ``modules`` there (once a worker: it keeps
    them; one that cannot be imported is left out): a task that costs only PySpark's round trip."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a stream's module that fails here fails in its own tasks, with its error
            continue
    yield from batches
