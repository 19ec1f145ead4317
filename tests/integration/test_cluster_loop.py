"""The closed loop across hosts: ``benchmarks.cluster --quick --loop-only`` (the Dagster daemon, the driver's
agent, a master and two workers each on a simulated host; the orders example's files, checkpoints and event logs on
S3), judged by its JSON line. Run as its own process: its oracle reads S3 through a JVM started with S3A's jars. The
native migration on S3 is tested in test_hosts.py, so the benchmark's timing of it is left out here. Skipped only
where network namespaces cannot be made, with that reason."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_reconf.workloads.hosts import hosts_unavailable

UNAVAILABLE = hosts_unavailable()
pytestmark = [
    pytest.mark.spark,
    pytest.mark.cluster,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no simulated hosts here: {UNAVAILABLE}"),
]
REPO = Path(__file__).resolve().parents[2]


def test_the_closed_loop_scales_a_stream_on_other_hosts_onto_the_second_worker_and_loses_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cluster", "--quick", "--loop-only"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["hosts"], result["storage"]) == (5, "s3a")
    assert result["converged"] and result["steps"] >= 1, (result["converged"], result["steps"], done.stderr[-8000:])
    assert result["failed_runs"] == [], result["failed_runs"]
    assert result["workers_used"] == 2 and result["final_cores"] >= 2, result  # the step added the second worker
    assert result["lost"] == 0 and result["duplicated"] == 0, result
