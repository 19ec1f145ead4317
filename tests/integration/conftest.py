import time
from collections.abc import Callable

import pytest

from dagster_reconf.core.session import helper_session


@pytest.fixture(name="spark", scope="module")
def spark_fixture():
    """One local SparkSession per test module: Spark start-up is slow."""
    spark = helper_session("reconf-tests", shuffle_partitions=2)
    yield spark
    spark.stop()


def wait_until(predicate: Callable[[], object], timeout_s: float = 120.0, what: str = "condition") -> object:
    """Poll ``predicate`` until it is truthy; fail the test with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def assert_matches_oracle(spark, home, spec, watermark=None):
    """The stopped bundled stream's output equals the batch oracle over every event it read (and is not empty)."""
    from dagster_reconf.workloads.oracle import check_stream_output

    comparison = check_stream_output(spark, home, spec, watermark=watermark)
    assert comparison.ok, comparison
    assert comparison.expected_rows > 0, "the oracle produced no rows: the test would prove nothing"
    return comparison
