"""The Python workers' CPU counter, on a real process tree shaped like PySpark's."""

import subprocess
import sys
import time

import psutil
import pytest

from dagster_reconf.core.spark.python_worker_cpu import python_worker_cpu_s, python_workers, stop_python_workers

# A "driver" that starts two busy children with PySpark's command-line shape: the task worker's last argument is
# pyspark.worker (-c stands in for -m), the other is a planner worker, which is not a task worker.
_BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(60)"
_DRIVER = f"""
import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", {_BUSY!r}, name])
            for name in ("pyspark.worker", "pyspark.sql.worker.plan_data_source_read")]
time.sleep(60)
"""


def wait_until_dead(process: psutil.Process, timeout_s: float = 10.0) -> None:
    """Gone, or a zombie its parent (the fake driver, which never reaps) leaves behind."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {process.pid} still runs")


def test_counts_and_stops_the_pyspark_worker_processes_under_the_root_only():
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER])
    try:
        root = psutil.Process(driver.pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            children = root.children()
            if len(children) == 2 and min(c.cpu_times().user + c.cpu_times().system for c in children) >= 0.3:
                break
            time.sleep(0.1)
        worker = next(c for c in root.children() if c.cmdline()[-1] == "pyspark.worker")
        assert python_worker_cpu_s(root) == pytest.approx(sum(worker.cpu_times()[:2]), abs=0.02)
        assert python_worker_cpu_s(root) >= 0.3
        assert python_worker_cpu_s(worker) == 0.0  # nothing under a worker
        assert python_workers(root) == [worker]
        assert python_worker_cpu_s(workers=[worker]) == pytest.approx(python_worker_cpu_s(root), abs=0.02)

        planner = next(c for c in root.children() if c.pid != worker.pid)
        assert stop_python_workers(root) == 1
        wait_until_dead(worker)
        assert python_workers(root) == [] and planner.status() != psutil.STATUS_ZOMBIE, "only the task worker goes"
    finally:
        for child in psutil.Process(driver.pid).children(recursive=True):
            child.kill()
        driver.kill()
        driver.wait()


def test_the_sampler_keeps_timed_samples_until_drained_and_stops():
    from dagster_reconf.core.spark.python_worker_cpu import PythonCpuSampler

    counter = iter(range(1_000_000))
    sampler = PythonCpuSampler(period_s=0.01, max_samples=50, probe=lambda: next(counter) / 1000.0).start()
    try:
        time.sleep(0.3)
        first = sampler.drain()
        assert 5 <= len(first) <= 50  # bounded: the newest 50
        assert all(b[0] >= a[0] and b[1] > a[1] for a, b in zip(first, first[1:]))  # epoch ms, CPU ms, in order
        assert abs(first[-1][0] / 1000.0 - time.time()) < 1.0
        time.sleep(0.05)
        assert sampler.drain()[0][1] > first[-1][1]  # a drain takes what it returns
    finally:
        sampler.stop()
    left = sampler.drain()
    time.sleep(0.05)
    assert sampler.drain() == [] and len(left) <= 2
    with pytest.raises(ValueError, match="period_s"):
        PythonCpuSampler(period_s=0)
    idle = PythonCpuSampler(period_s=0.01, idle_s=0.1, probe=lambda: 1.0).start()  # nobody drains: it pauses
    try:
        time.sleep(0.4)
        assert idle.drain() == []
        time.sleep(0.05)
        assert idle.drain()  # the drain re-armed it
    finally:
        idle.stop()


def _await_exec(pid: int, last_arg: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while psutil.Process(pid).cmdline()[-1:] != [last_arg]:
        assert time.monotonic() < deadline, f"process {pid} did not exec within {timeout_s} s"
        time.sleep(0.01)


def test_the_sampler_counts_the_workers_afresh_at_each_read():
    from dagster_reconf.core.spark.python_worker_cpu import PythonCpuSampler

    sampler = PythonCpuSampler(period_s=60)  # not started: only the listener's per-batch reads
    started = []
    try:
        for expected in (1, 2):
            started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "pyspark.worker"]))
            _await_exec(started[-1].pid, "pyspark.worker")  # Popen returns at the fork, before the child's exec
            sampler.read()
            assert sampler.workers() == expected  # the read lists them: a batch sees the workers forked during it
    finally:
        for process in started:
            process.kill()
            process.wait()
    assert PythonCpuSampler(probe=lambda: 1.0).workers() is None  # a probe that does not list them
