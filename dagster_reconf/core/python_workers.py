"""CPU time of the Python workers that run a local-mode stream's Python tasks.

Spark's task metrics count the executor JVM's CPU only. A stage that runs Python (a
Python data source scan, ``mapInArrow``, a pandas UDF) spends most of its CPU in a
``pyspark.worker`` process, which the metrics call waiting. That CPU does not scale
past the machine's CPUs, so a model that took it for waiting would predict linear
speed-ups that the machine cannot give (measured: a self-join's two Python scans at
11 tasks on 2 CPUs ran 40 % slower per event than at 1 task).

In local mode those workers are this process's descendants: PySpark's worker daemon
(``python -m pyspark.daemon pyspark.worker``) and the workers it forks. Their CPU time,
with what reaped workers left in the daemon's ``children_*`` times, is a counter
that only grows while the session lives; the listener samples it with every
progress event, and the profile turns the difference between two batches into CPU
per event (see ``scaling.profile``). On a cluster the workers run on other machines
and the counter is not recorded.
"""

from __future__ import annotations

import psutil

__all__ = ["python_worker_cpu_s"]

_WORKER_MODULE = "pyspark.worker"


def python_worker_cpu_s(root: psutil.Process | None = None) -> float:
    """CPU seconds (user + system) the ``pyspark.worker`` processes under ``root`` have used, reaped workers included.

    Args:
        root: the process whose descendants are searched (default: this one, the driver).
    """
    total = 0.0
    for process in (root or psutil.Process()).children(recursive=True):
        try:
            if process.cmdline()[-1:] != [_WORKER_MODULE]:
                continue
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # exited between the listing and the read: its time moves to the daemon's children_* times
        total += times.user + times.system + times.children_user + times.children_system
    return total
