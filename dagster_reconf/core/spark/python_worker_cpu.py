"""CPU time of the Python workers that run a local-mode stream's Python tasks.

Spark's task metrics count the executor JVM's CPU only. A stage that runs Python (a
Python data source scan, ``mapInArrow``, a pandas UDF) spends most of its CPU in a
``pyspark.worker`` process, which the metrics call waiting. That CPU does not scale
past the machine's CPUs, so a model that took it for waiting would predict linear
speed-ups that the machine cannot give.

In local mode those workers are this process's descendants: PySpark's worker daemon
(``python -m pyspark.daemon pyspark.worker``) and the workers it forks. Their CPU time,
with what reaped workers left in the daemon's ``children_*`` times, is a counter
that only grows while the session lives; the listener samples it with every
progress event, and the profile turns the difference between two batches into CPU
per event (see ``scaling.profile``). On a cluster the workers run on other machines
and the counter is not recorded.

A batch's total cannot tell CPU a task pays whatever its data (a worker's set-up for the
task: unpickling the reader or function, opening its Arrow streams) from CPU per event:
every batch of one configuration has the same tasks and about the same events. *When*
the CPU is spent can: set-up comes in a burst as each task starts, per-event CPU spreads
over the task. :class:`PythonCpuSampler` samples the counter ten times a second, and the
listener records the samples with each batch (``python_cpu_samples``), for the profile to
regress on its tasks' starts and events (see ``scaling.profile``).

:func:`stop_python_workers` kills them, for a driver that hands its stream over (see its docstring).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import psutil

__all__ = ["PythonCpuSampler", "python_worker_cpu_s", "python_workers", "stop_python_workers"]

_WORKER_MODULE = "pyspark.worker"


def python_workers(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The ``pyspark.worker`` processes under ``root`` (default: this one, the driver): the daemon and its workers."""
    found = []
    for process in (root or psutil.Process()).children(recursive=True):
        try:
            if process.cmdline()[-1:] == [_WORKER_MODULE]:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def stop_python_workers(root: psutil.Process | None = None) -> int:
    """Kill the ``pyspark.worker`` processes under ``root`` (default: this driver); how many there were.

    For a driver that runs no Python task again (one that handed its stream over). A task a
    query stop interrupted keeps a JVM thread spinning on a full core until its Python worker
    ends (Spark 4.3's reader loops on a selector that an interrupted thread wakes at once): up
    to the rest of the worker's partition, or 2 s of polling plus ``spark.python.task.killTimeout``
    before Spark kills the worker itself.
    """
    workers = python_workers(root)
    for process in workers:
        try:
            process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return len(workers)


def python_worker_cpu_s(root: psutil.Process | None = None, workers: list[psutil.Process] | None = None) -> float:
    """CPU seconds (user + system) the ``pyspark.worker`` processes under ``root`` have used, reaped workers included.

    Args:
        root: the process whose descendants are searched (default: this one, the driver).
        workers: those processes, listed before (:func:`python_workers`): listing them reads every process's
            ``/proc`` entry, reading their times only theirs.
    """
    total = 0.0
    for process in python_workers(root) if workers is None else workers:
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # exited since the listing: its time moves to the daemon's children_* times
        total += times.user + times.system + times.children_user + times.children_system
    return total


class _ListedWorkers:
    """:func:`python_worker_cpu_s` over a list of the workers renewed every ``refresh_s`` (a sampler's probe)."""

    def __init__(self, refresh_s: float = 1.0) -> None:
        self.refresh_s = refresh_s
        self._workers: list[psutil.Process] = []
        self._listed_at = float("-inf")

    def __call__(self, fresh: bool = False) -> float:
        if fresh or time.monotonic() - self._listed_at >= self.refresh_s:
            self._workers, self._listed_at = python_workers(), time.monotonic()
        return python_worker_cpu_s(workers=self._workers)

    @property
    def count(self) -> int:
        """Workers in the newest listing."""
        return len(self._workers)


class PythonCpuSampler:
    """Samples :func:`python_worker_cpu_s` every ``period_s`` on a daemon thread, as ``[epoch ms, CPU ms]`` pairs.

    The workers are listed once a second and only their times read at every sample: listing
    them reads every process's ``/proc`` entry.

    The pairs wait in a bounded buffer (the newest ``max_samples``) until :meth:`drain` takes
    them. Nobody draining for ``idle_s`` (no batches: the query stopped, its runtime was
    dropped without a shutdown) pauses the sampling until the next drain.
    """

    def __init__(
        self,
        period_s: float = 0.1,
        max_samples: int = 6000,
        idle_s: float = 120.0,
        probe: Callable[[], float] | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        self.period_s = period_s
        self.idle_s = idle_s
        self._probe = probe or _ListedWorkers()  # a new worker counts from the next listing, its CPU so far with it
        self._samples: deque[list[float]] = deque(maxlen=max_samples)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drained_at = time.monotonic()

    def start(self) -> "PythonCpuSampler":
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="python-cpu-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.period_s + 1)
        self._thread = None

    def read(self) -> float:
        """The counter now, in CPU seconds, from the sampler's list of workers (the listener's per-batch reading:
        listed afresh where the probe lists, so :meth:`workers` counts them as of now)."""
        return self._probe(fresh=True) if isinstance(self._probe, _ListedWorkers) else self._probe()

    def workers(self) -> int | None:
        """The Python workers in the newest listing (None for a probe that does not list them). A worker's first task
        imports PySpark and the task's code (seconds on busy CPUs), so a batch in which their number grew ran
        stragglers that later batches do not (see ``scaling.evidence``)."""
        return self._probe.count if isinstance(self._probe, _ListedWorkers) else None

    def drain(self) -> list[list[float]]:
        """The samples since the last drain, oldest first."""
        self._drained_at = time.monotonic()
        taken = []
        while self._samples:
            taken.append(self._samples.popleft())
        return taken

    def _run(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._drained_at > self.idle_s:
                self._samples.clear()
                self._stop.wait(self.period_s)
                continue
            before = time.time()
            try:
                cpu_s = self._probe()
            except (psutil.Error, OSError):  # a sample missing is better than a sampler gone
                cpu_s = None
            if cpu_s is not None:
                self._samples.append([round((before + time.time()) * 500.0, 1), round(cpu_s * 1000.0, 1)])
            self._stop.wait(self.period_s)
