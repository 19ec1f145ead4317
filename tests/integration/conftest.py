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
