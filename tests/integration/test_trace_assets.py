"""trace_snapshots and cp_summaries materialized from a real stream's event log; GX checks;
a corrupted log fails the check readably; the schedule asks for running streams only."""

import shutil
from datetime import datetime, timezone

import pytest
from dagster import MultiPartitionKey, TableMetadataValue, build_schedule_context, instance_for_test, materialize

from dagster_reconf import StreamRuntimeResource, build_trace_assets
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.traces.codecs import decompressed
from dagster_reconf.core.traces.eventlog import log_files
from dagster_reconf.core.traces.store import TraceStore
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import run_to_end

pytestmark = pytest.mark.spark

STREAM, BROKEN = "nexmark-q5", "broken"
TRACES = build_trace_assets(streams=[STREAM, BROKEN], window_minutes=60)


@pytest.fixture(name="home", scope="module")
def home_fixture(tmp_path_factory):
    """A real Q5 run with its own session (event log on), and a copy of its log with a corrupt line."""
    home = tmp_path_factory.mktemp("home")
    spec = bundled_spec(
        STREAM, "q5", rate=1_000_000, max_events=9000, max_per_trigger=3000, trigger_interval_s=0.1, state_partitions=2
    )
    log = run_to_end(home, spec)
    text = b"".join(decompressed(f) for f in log_files(log)).splitlines(keepends=True)
    broken = StreamPaths(home, BROKEN).event_log
    broken.mkdir(parents=True)
    (broken / "local-1").write_bytes(b"".join(text[:40] + [b"{this line is not json\n"] + text[40:]))
    return home


def window_of(home, stream: str) -> str:
    """The hourly window holding most of the stream's activity."""
    store = TraceStore(home / "probe" / stream)
    store.ingest(StreamPaths(home, stream).event_log)
    _, end = store.time_range()
    shutil.rmtree(home / "probe" / stream)
    return datetime.fromtimestamp(end / 1000, timezone.utc).strftime("%Y-%m-%d-%H:00")


def run(home, stream):
    window = window_of(home, stream)
    with instance_for_test() as instance:
        instance.add_dynamic_partitions(TRACES.windows.name, [window])  # as the sensors register it
        return materialize(
            [TRACES.snapshots, TRACES.summaries],
            partition_key=MultiPartitionKey({"stream": stream, "window": window}),
            resources={"streams": StreamRuntimeResource(home=str(home))},
            instance=instance,
            raise_on_error=False,
        )


def checks(result):
    return {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def test_snapshot_and_cp_summaries_materialize_with_passing_checks(home):
    result = run(home, STREAM)
    assert result.success
    snapshot_md = result.asset_materializations_for_node("trace_snapshots")[0].metadata
    assert snapshot_md["activities"].value > 50 and snapshot_md["tasks"].value >= 6
    assert len(snapshot_md["batches"].value) >= 3
    summary_md = result.asset_materializations_for_node("cp_summaries")[0].metadata
    assert summary_md["plot"].value.startswith("![critical participation](data:image/png;base64,iVBOR")
    assert abs(summary_md["cp_sum"].value - 1) <= 1e-9
    for table in ("by_activity_type", "by_worker", "by_operator", "by_channel"):  # typed tables, shares rounded
        value = summary_md[table]
        assert isinstance(value, TableMetadataValue) and value.records, table
        assert {"cp", "time_share"} <= {c.name for c in value.schema.columns}, table
    assert sum(r.data["cp"] for r in summary_md["by_activity_type"].records) == pytest.approx(1.0, abs=0.01)
    assert snapshot_md["window_end"].value - snapshot_md["window_start"].value == 3600  # timestamps, seconds
    evaluations = checks(result)
    assert evaluations["schema_and_invariants"].passed, evaluations["schema_and_invariants"].description
    assert evaluations["cp_sums_to_one"].passed
    # The activities stay in the trace store (a reference in the metadata): nothing goes through an IO manager.
    assert snapshot_md["trace_store"].value == str(StreamPaths(home, STREAM).traces)
    assert not [e for e in result.all_events if e.event_type_value in ("HANDLED_OUTPUT", "LOADED_INPUT")]


def test_corrupted_log_fails_the_check_readably(home):
    result = run(home, BROKEN)
    evaluation = checks(result)["schema_and_invariants"]
    assert not evaluation.passed
    assert evaluation.description.startswith("1 corrupt_line in broken's event log")


def test_schedule_requests_only_running_streams(home):
    with instance_for_test() as instance:
        context = build_schedule_context(
            instance=instance,
            resources={"streams": StreamRuntimeResource(home=str(home))},
            scheduled_execution_time=datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc),
        )
        skip = TRACES.schedule.evaluate_tick(context)
        assert skip.run_requests == [] and "has a running driver" in skip.skip_message
