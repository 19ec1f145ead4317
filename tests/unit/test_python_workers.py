"""The Python workers' CPU counter, on a real process tree shaped like PySpark's."""

import subprocess
import sys
import time

import psutil
import pytest

from dagster_reconf.core.python_workers import python_worker_cpu_s

# A "driver" that starts two busy children with PySpark's command-line shape: the task worker's last argument is
# pyspark.worker (-c stands in for -m), the other is a planner worker, which is not a task worker.
_BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(60)"
_DRIVER = f"""
import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", {_BUSY!r}, name])
            for name in ("pyspark.worker", "pyspark.sql.worker.plan_data_source_read")]
time.sleep(60)
"""


def test_counts_the_pyspark_worker_processes_under_the_root_only():
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
    finally:
        for child in psutil.Process(driver.pid).children(recursive=True):
            child.kill()
        driver.kill()
        driver.wait()
