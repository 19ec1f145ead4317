"""Every bundled query: a few batches, a stop at a batch boundary, a restart with other
source parallelism from the checkpoint, and output equal to the batch oracle."""

import json
import time

import pytest

from dagster_reconf.core.spark.python_task_overhead import kept_python_task_cpu_ms, measure_python_task_cpu_ms
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import progress_row
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.queries import QUERIES
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import assert_matches_oracle, wait_until

pytestmark = pytest.mark.spark

EVENTS = 12_000
# Q11 needs sessions to close within the run: slow event time down so gaps appear.
QUERY_SETTINGS = {"q11": {"event_time_rate": 50}, "wordcount": {"vocabulary": 500, "max_events": 4_000}}


@pytest.mark.parametrize("query", list(QUERIES))
def test_query_stops_restarts_and_matches_oracle(spark, tmp_path, query):
    settings = {"max_events": EVENTS, **QUERY_SETTINGS.get(query, {})}
    total = settings["max_events"]
    spec = bundled_spec(
        f"it-{query}",
        query,
        rate=1_000_000,
        max_per_trigger=total // 6,
        trigger_interval_s=0.1,
        source_partitions=2,
        state_partitions=2,
        **settings,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name), spark=spark)
    runtime.start()
    wait_until(lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= 1, what="2 batches")

    # The source always has more data here, so this stop races running batches.
    report = runtime.stop_at_batch_boundary(timeout_s=60)
    info = checkpoint_facts(runtime.paths.checkpoint)
    assert not runtime.is_active
    assert info.committed and report.last_committed_batch == info.last_committed_batch

    result = runtime.restart({"source_partitions": 3})
    assert result["scope"] == "query"
    runtime.query.processAllAvailable()
    runtime.stop_at_batch_boundary(timeout_s=60)
    last = runtime.query.lastProgress
    assert progress_row(last)["end_offset"] == total

    assert_matches_oracle(spark, tmp_path, runtime.spec, watermark=last["eventTime"].get("watermark"))


def test_state_partitions_change_is_refused_without_migration(spark, tmp_path):
    spec = bundled_spec(
        "it-refuse", "wordcount", rate=1_000_000, max_events=1000, trigger_interval_s=0.1, state_partitions=2
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name), spark=spark)
    runtime.start()
    runtime.query.processAllAvailable()
    with pytest.raises(Exception, match=r"changing state_partitions 2 -> 4 of stateful stream 'it-refuse' moves state"):
        runtime.restart({"state_partitions": 4})
    assert runtime.is_active, "a refused change must leave the stream running"
    runtime.stop_at_batch_boundary()
    # A new runtime over the same checkpoint with other state partitions is refused too.
    other = StreamRuntime(spec.with_changes({"state_partitions": 4}), runtime.paths, spark=spark)
    with pytest.raises(Exception, match=r"checkpoint .* has 2 state partitions but the spec asks for 4"):
        other.start()


@pytest.mark.parametrize("mode", ["sleep", "cpu"])
def test_record_cost_slows_processing_without_changing_output(spark, tmp_path, mode):
    """2,000 events at 500 us each is at least 1 s of task time (a lower bound, not a timing)."""
    spec = bundled_spec(
        f"it-cost-{mode}",
        "q2",
        rate=1_000_000,
        max_events=2000,
        trigger_interval_s=0.1,
        source_partitions=2,
        cost={"mode": mode, "micros_per_record": 500},
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name), spark=spark)
    runtime.start()
    runtime.query.processAllAvailable()
    runtime.stop_at_batch_boundary()
    progress = [dict(p) for p in runtime.query.recentProgress]
    busy_ms = sum(p["durationMs"].get("addBatch", 0) for p in progress)
    assert busy_ms >= 2000 * 500 / 1000 / spec.source_partitions
    assert_matches_oracle(spark, tmp_path, runtime.spec)


def test_rate_steps_change_what_a_running_stream_is_offered(spark, tmp_path):
    """50 events/s, then 2,000/s from 2 s on: more than the first rate could offer in all the time the test ran."""
    began = time.monotonic()
    spec = bundled_spec("it-steps", "q1", rate=50, rate_steps="2:2000", trigger_interval_s=0.5, source_partitions=2)
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name), spark=spark)
    runtime.start()

    def latest() -> int:
        progress = runtime.query.lastProgress
        return (progress_row(progress)["latest_offset"] or 0) if progress else 0

    wait_until(lambda: latest() > 1_000, what="the second rate's events")
    offered, elapsed = latest(), time.monotonic() - began
    runtime.stop_at_batch_boundary()
    assert offered > 2 * 50 * elapsed, f"{offered} events offered in {elapsed:.1f} s: the step to 2,000/s did not apply"


def test_python_workers_import_pyspark_compiled_from_this_interpreter(spark):
    # Spark puts the uncompiled pyspark.zip first on its workers' path (1.1 s to import a data source's runner against
    # 0.34 s compiled, paid at every query start); the session's worker shim drops it
    # (core/spark/worker_interpreter.py).
    import pyspark

    seen = spark.range(4).repartition(2).rdd.map(lambda _: __import__("pyspark").__file__).distinct().collect()
    assert seen == [pyspark.__file__]


def test_pysparks_cpu_per_python_task_is_measured_once_per_machine_and_stream_code(spark, tmp_path):
    # A trivial mapInArrow's CPU per task in workers that imported the stream's module (see
    # core/spark/python_task_overhead.py).
    kept = tmp_path / "python-task-cpu.json"
    measured = kept_python_task_cpu_ms(spark, ["dagster_reconf.workloads.streams"], kept)
    assert measured is not None and 1.0 < measured < 1_000.0
    assert json.loads(kept.read_text())["ms"] == {"dagster_reconf.workloads.streams": measured}
    # kept: the next driver on this machine reads it without a job (no session to run one in)
    assert kept_python_task_cpu_ms(None, ["dagster_reconf.workloads.streams"], kept) == measured
    # another stream's code is measured beside it; a module the workers cannot import is left out, not fatal
    other = kept_python_task_cpu_ms(spark, ["no_such_module_here"], kept)
    assert other is not None and set(json.loads(kept.read_text())["ms"]) == {
        "dagster_reconf.workloads.streams",
        "no_such_module_here",
    }
    # measured on another machine (or Python, or PySpark): measured again, the other machine's figures dropped
    kept.write_text(json.dumps({"facts": {"host": "elsewhere"}, "ms": {"": 1.0}}))
    assert kept_python_task_cpu_ms(spark, path=kept) != 1.0 and set(json.loads(kept.read_text())["ms"]) == {""}
    with pytest.raises(ValueError, match="tasks >= 1"):
        measure_python_task_cpu_ms(spark, tasks=0)
