"""The oracle's own process: bounded well inside a test's timeout, and when it runs out the failure says which Spark
stage it was in and how far, and no JVM or Python worker of it is left behind."""

import os
import uuid

import psutil
import pytest

from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.harness.oracle import OracleTimeout, check_output_in_process

pytestmark = pytest.mark.spark


def test_an_oracle_past_its_bound_fails_with_the_stage_it_was_in_and_leaves_nothing_running(tmp_path):
    spec = StreamSpec(name="slow-oracle", entrypoint="tests.user_streams.slow_oracle:values")
    paths = StreamPaths(tmp_path, spec.name)
    paths.spec.parent.mkdir(parents=True)
    paths.spec.write_text(spec.model_dump_json())
    mark = uuid.uuid4().hex  # inherited by the oracle's Python, its JVM and its Python workers
    with pytest.raises(OracleTimeout, match=r"ran past its 45 s; it was at: .*stage \d+ .*0/2 tasks done, 2 running"):
        check_output_in_process(tmp_path, spec.name, env={**os.environ, "RECONF_TEST_MARK": mark}, timeout_s=45)
    assert [p for p in psutil.process_iter() if _marked(p, mark)] == []


def _marked(process: psutil.Process, mark: str) -> bool:
    try:
        return process.environ().get("RECONF_TEST_MARK") == mark
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
