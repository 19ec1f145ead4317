"""Trace ingestion and CP on event logs that Spark itself writes, for bundled streams."""

import pandas as pd
import pytest

from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.traces.activities import TraceNormalizer
from dagster_reconf.core.traces.critical_path import snapshot
from dagster_reconf.core.traces.event_schema import ACTIVITY_TYPES
from dagster_reconf.core.traces.event_table import TableReadResult
from dagster_reconf.core.traces.eventlog import read_events
from dagster_reconf.core.traces.store import normalize_log
from dagster_reconf.core.traces.summaries import summarize
from dagster_reconf.workloads.streams import bundled_spec

pytestmark = pytest.mark.spark


def app_log(paths: StreamPaths):
    (log,) = list(paths.event_log.iterdir())
    return log


def assert_same_rows(a, b):
    keys = ["task_id", "attempt", "activity", "worker", "src_worker", "dst_worker", "start_ms", "end_ms"]
    ordered = lambda f: f.sort_values(keys, na_position="first", ignore_index=True)  # noqa: E731
    pd.testing.assert_frame_equal(ordered(a), ordered(b))


def batch_windows(table):
    spans = table[table["batch_id"] >= 0].groupby("batch_id").agg(lo=("start_ms", "min"), hi=("end_ms", "max"))
    return list(spans.itertuples())


@pytest.mark.parametrize(
    "codec,rolling",
    [("zstd", True), ("zstd", False), ("lz4", False), ("snappy", False), (None, False)],
)
def test_stream_log_normalizes_with_stable_operators_and_cp(tmp_path, codec, rolling):
    conf = {
        "spark.eventLog.rolling.enabled": str(rolling).lower(),
        "spark.eventLog.compress": str(codec is not None).lower(),
    }
    if codec:
        conf["spark.eventLog.compression.codec"] = codec
    spec = bundled_spec(
        "traced",
        "q5",
        rate=1_000_000,
        max_events=9000,
        max_per_trigger=3000,
        trigger_interval_s=0.1,
        state_partitions=2,
        spark_conf=conf,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name))
    try:
        runtime.start()
        runtime.query.processAllAvailable()
        # Read while the application still runs (an in-progress log), then the rest after.
        log = app_log(runtime.paths)
        first = read_events(log)
        assert first.events and first.events[0]["Event"] == "SparkListenerLogStart"
    finally:
        runtime.shutdown()
    log = app_log(runtime.paths)
    assert log.name.startswith("eventlog_v2_") == rolling
    rest = read_events(log, first.cursor)
    normalizer = TraceNormalizer()
    normalizer.add(first.events + rest.events)
    table = normalizer.table()
    assert normalizer.app_id and set(table["activity"]) <= set(ACTIVITY_TYPES)
    assert (table["end_ms"] >= table["start_ms"]).all()
    assert table["query_id"].dropna().nunique() == 1
    whole_log, _, read = normalize_log(log)
    assert isinstance(read, TableReadResult), "Spark's own log must take the Arrow fast path"
    assert_same_rows(whole_log, table)

    per_batch = table[table["batch_id"] >= 0].groupby("batch_id")["operator"].apply(frozenset)
    data_batches = per_batch[per_batch.map(len) > 1]
    assert len(data_batches) >= 3 and data_batches.nunique() == 1, "operators must be the same in every batch"

    for window in batch_windows(table):
        _, result = snapshot(table, window.lo, window.hi)
        assert abs(result.cp_sum - 1) <= 1e-9
    summaries = summarize(table, snapshot(table, table["start_ms"].min(), table["end_ms"].max())[1])
    assert summaries["by_worker"]["cp"].sum() == pytest.approx(1.0, abs=1e-9)


def test_failed_task_attempt_and_retry_are_kept(tmp_path):
    """local[2,3] retries failed tasks; the first attempt of partition 0 fails on purpose."""
    spec = bundled_spec(
        "flaky",
        "wordcount",
        master="local[2,3]",
        rate=1_000_000,
        max_events=2000,
        trigger_interval_s=0.1,
        state_partitions=2,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name))
    try:
        runtime.start()
        runtime.query.processAllAvailable()

        def fail_first_attempt(batches):
            from pyspark import TaskContext

            context = TaskContext.get()
            if context.partitionId() == 0 and context.attemptNumber() == 0:
                raise RuntimeError("injected failure")
            yield from batches

        frame = runtime.spark.range(0, 1000, numPartitions=2)
        assert frame.mapInArrow(fail_first_attempt, frame.schema).count() == 1000
    finally:
        runtime.shutdown()
    normalizer = TraceNormalizer()
    normalizer.add(read_events(app_log(runtime.paths)).events)
    table = normalizer.table()
    tasks = table[table["src_worker"].isna()].drop_duplicates(["task_id", "attempt"])
    failed = tasks[tasks["status"] == "failed"]
    assert len(failed) == 1 and failed["attempt"].iloc[0] == 0
    retried = tasks[(tasks["stage_id"] == failed["stage_id"].iloc[0]) & (tasks["attempt"] == 1)]
    assert len(retried) == 1 and retried["status"].iloc[0] == "success"
    assert normalizer.skipped["failed task attempt (kept, marked failed)"] == 1
    assert_same_rows(normalize_log(app_log(runtime.paths))[0], table)
    _, result = snapshot(table, table["start_ms"].min(), table["end_ms"].max())
    assert abs(result.cp_sum - 1) <= 1e-9
