"""The stream_progress asset and the progress sensor over a real stream's metrics store."""

import json

import pytest
from dagster import AssetKey, DagsterInstance, build_sensor_context, instance_for_test, materialize

from assets.stream_progress import stream_progress
from dagster_reconf import StreamRuntimeResource, build_stream_progress_sensor
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.streams import bundled_spec

pytestmark = pytest.mark.spark

STREAM = "nexmark-q5"  # a bundled stream name: the asset's partitions are the bundled streams


@pytest.fixture(name="home", scope="module")
def home_fixture(spark, tmp_path_factory):
    """A real Q5 stream that ran to the end of its bounded input, leaving its metrics store."""
    home = tmp_path_factory.mktemp("home")
    spec = bundled_spec(STREAM, "q5", rate=1_000_000, max_events=6000, max_per_trigger=2000, trigger_interval_s=0.1)
    runtime = StreamRuntime(spec, StreamPaths(home, STREAM), spark=spark)
    runtime.start()
    runtime.query.processAllAvailable()
    runtime.stop_at_batch_boundary()
    return home


def test_stream_progress_materializes_real_figures(home):
    result = materialize(
        [stream_progress], partition_key=STREAM, resources={"streams": StreamRuntimeResource(home=str(home))}
    )
    assert result.success
    metadata = result.asset_materializations_for_node("stream_progress")[0].metadata
    assert metadata["batches"].value >= 3
    assert metadata["last_batch_id"].value >= 2
    assert metadata["state_rows"].value > 0
    assert metadata["recent_batches"].value.split("|")[1].strip() == "batch_id"


def _tick(sensor, instance: DagsterInstance, home, cursor):
    context = build_sensor_context(
        instance=instance, cursor=cursor, resources={"streams": StreamRuntimeResource(home=str(home))}
    )
    return sensor(context)


def test_progress_sensor_observes_then_skips_with_reason(home):
    sensor = build_stream_progress_sensor(stream=STREAM)
    assert sensor.name == "nexmark_q5_progress_sensor"
    with instance_for_test() as instance:
        first = _tick(sensor, instance, home, None)
        assert first.run_requests in (None, [])
        (observation,) = first.asset_events
        assert observation.asset_key == AssetKey("stream_progress") and observation.partition == STREAM
        assert observation.metadata["last_batch_id"].value >= 2
        cursor = json.loads(first.cursor)
        assert cursor == {"version": 1, "offset": StreamPaths(home, STREAM).metrics.stat().st_size}

        second = _tick(sensor, instance, home, first.cursor)
        assert second.asset_events == []
        assert (
            second.skip_reason.skip_message
            == f"stream '{STREAM}': no new progress since byte {cursor['offset']} of its metrics store"
        )
        assert second.cursor == first.cursor


def test_progress_sensor_restarts_on_bad_cursor(home):
    sensor = build_stream_progress_sensor(stream=STREAM)
    with instance_for_test() as instance:
        result = _tick(sensor, instance, home, "{garbage")
        assert len(result.asset_events) == 1
        assert json.loads(result.cursor)["offset"] > 0
