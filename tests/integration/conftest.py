import time
from collections.abc import Callable

import psutil
import pytest

from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.spark.session import helper_session


@pytest.fixture(name="spark", scope="module")
def spark_fixture():
    """One local SparkSession per test module: Spark start-up is slow."""
    spark = helper_session("reconf-tests", shuffle_partitions=2)
    yield spark
    spark.stop()


@pytest.fixture(autouse=True)
def _no_query_outlives_its_test(request):
    """A test that fails before stopping its stream would leave it running in the module's session, loading every
    later test: whatever is still active is stopped after each test."""
    yield
    if "spark" in request.fixturenames:
        for query in request.getfixturevalue("spark").streams.active:
            query.stop()


def drivers_under(home) -> list[psutil.Process]:
    """Live driver processes started for streams under ``home``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "dagster_reconf.core.process.driver" in cmdline and any(str(home) in part for part in cmdline):
            found.append(proc)
    return found


@pytest.fixture(name="supervisor")
def supervisor_fixture(tmp_path):
    """A supervisor over a fresh home; every driver it started is stopped after the test, and none may survive."""
    supervisor = StreamSupervisor(tmp_path / "home")
    yield supervisor
    for row in supervisor.list():
        if row["driver"] == "running":
            supervisor.stop(row["name"], timeout_s=60)
    assert drivers_under(supervisor.home) == []


def run_to_end(home, spec):
    """Run ``spec`` (a bounded stream) in this process to the end of its input, then stop it: its finished event log."""
    from dagster_reconf.core.spark.runtime import StreamRuntime
    from dagster_reconf.core.store.paths import StreamPaths
    from dagster_reconf.core.traces.store import application_logs

    runtime = StreamRuntime(spec, StreamPaths(home, spec.name))
    try:
        runtime.start()
        runtime.query.processAllAvailable()
    finally:
        runtime.shutdown()
    (log,) = application_logs(runtime.paths.event_log)
    return log


def wait_until(
    predicate: Callable[[], object], timeout_s: float = 120.0, what: str = "condition", interval_s: float = 0.2
) -> object:
    """Poll ``predicate`` every ``interval_s`` until it is truthy; fail the test with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def assert_matches_oracle(spark, home, spec, watermark=None):
    """The stopped bundled stream's output equals the batch oracle over every event it read (and is not empty)."""
    from dagster_reconf.workloads.oracle import check_stream_output

    comparison = check_stream_output(spark, home, spec, watermark=watermark)
    assert comparison.ok, comparison
    assert comparison.expected_rows > 0, "the oracle produced no rows: the test would prove nothing"
    return comparison
