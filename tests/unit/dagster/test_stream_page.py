"""The stream's page: typed figures and three checks, from a sensor's tick or from observing the asset in a run."""

import dagster as dg

from dagster_reconf import StreamRuntimeResource, StreamSpec, build_trace_assets
from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.dagster.stream_page import STREAM_CHECKS, page_events
from dagster_reconf.dagster.streams_sensor import StreamRead, stream_tick

from .test_scaling_tick import BEHIND

POLICY = DS2Policy(PolicyConfig(stabilization_s=0))
KEY = dg.AssetKey("stream")
ROW = {"driver": "running", "spark_ui": "http://127.0.0.1:4040", "entrypoint": "my_streams:orders"}


def tick_events(memo: dict, records: list, row: dict = ROW, now: float = 100.0) -> list:
    state: dict = {}
    tick = stream_tick("s", POLICY, state, StreamRead(False, records, 1), keep=20, now=now)
    return page_events(
        KEY, "s", row, tick.window, tick.decision, POLICY, memo, new_batches=tick.new_batches, records=records
    )


def test_a_tick_with_batches_records_typed_figures_and_the_three_checks_once():
    memo: dict = {}
    events = tick_events(memo, BEHIND)
    observation, *checks = events
    assert isinstance(observation, dg.AssetObservation) and observation.partition == "s"
    figures = observation.metadata
    assert figures["state"].value == "running" and figures["lag_events"].value > 0
    assert isinstance(figures["lag_events"], dg.IntMetadataValue)
    assert isinstance(figures["lag_s"], dg.FloatMetadataValue)
    assert isinstance(figures["last_batch_at"], dg.TimestampMetadataValue)
    assert isinstance(figures["spark_ui"], dg.UrlMetadataValue) and figures["entrypoint"].value == "my_streams:orders"
    assert figures["trigger"].value.startswith("processingTime ") and figures["cores"].value == 1
    by_name = {c.check_name: c for c in checks}
    assert set(by_name) == {"driver_alive", "query_healthy", "lag_within_band"}
    assert all(c.metadata["stream"].value == "s" and c.description.startswith("s: ") for c in checks)
    assert all(c.partition is None and c.asset_key == KEY for c in checks), "the asset's checks, naming the stream"
    assert by_name["driver_alive"].passed and not by_name["lag_within_band"].passed
    assert by_name["lag_within_band"].severity == dg.AssetCheckSeverity.ERROR, "falling behind is red"
    again = tick_events(memo, BEHIND)
    assert [type(e) for e in again] == [dg.AssetObservation], "unchanged verdicts are not evaluated again at once"
    dead = tick_events(memo, [], row={"driver": "died"})
    assert {e.check_name: e.passed for e in dead if isinstance(e, dg.AssetCheckEvaluation)}["driver_alive"] is False
    assert dead[0].metadata["state"].value == "died", "a death changes the state: the page says so"
    with dg.instance_for_test() as instance:  # what the daemon does with a sensor's events, tick after tick
        for event in [*events, *again, *dead]:
            instance.report_runless_asset_event(event)
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(KEY, "driver_alive")]
        )
        assert latest[dg.AssetCheckKey(KEY, "driver_alive")].status.value == "FAILED"


def test_observing_a_stopped_stream_in_a_run_says_so_and_warns(tmp_path):
    home = tmp_path / "home"
    spec = StreamSpec(name="orders", entrypoint="my_streams:orders", master="local[1]", state_partitions=2)
    StreamPaths(home, "orders").create()
    StreamPaths(home, "orders").spec.write_text(spec.model_dump_json())
    traces = build_trace_assets(streams=["orders"], window_minutes=5)
    defs = dg.Definitions(assets=[traces.stream], resources={"streams": StreamRuntimeResource(home=str(home))})
    with dg.instance_for_test() as instance:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, partition_key="orders"
        )
        (observation,) = [e.event_specific_data.asset_observation for e in result.all_events if e.is_asset_observation]
        assert observation.metadata["state"].value == "stopped" and observation.partition == "orders"
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert set(checks) == {"driver_alive", "query_healthy", "lag_within_band"}
        alive = checks["driver_alive"]
        assert not alive.passed and alive.severity == dg.AssetCheckSeverity.WARN and "stopped" in alive.description


def test_a_failing_verdict_is_recorded_again_after_the_recheck_interval_and_a_changed_one_at_once():
    memo: dict = {}
    first = tick_events(memo, BEHIND)  # behind: lag_within_band fails
    assert any(isinstance(e, dg.AssetCheckEvaluation) for e in first)
    memo["checked_at"] = 0.0  # long ago
    again = tick_events(memo, BEHIND)
    assert {e.check_name for e in again if isinstance(e, dg.AssetCheckEvaluation)} == set(STREAM_CHECKS)
    passing = {"checks": {name: [True, False] for name in STREAM_CHECKS}, "checked_at": 0.0, "state": "died"}
    quiet = tick_events(passing, [], row={"driver": "died"})
    assert any(isinstance(e, dg.AssetCheckEvaluation) for e in quiet), "a changed verdict is recorded at once"


def test_a_stream_stopped_outside_a_tick_is_recorded_stopped_on_its_page():
    from dagster_reconf.dagster.stream_page import record_stopped

    with dg.instance_for_test() as instance:
        for event in tick_events({}, BEHIND):  # the last tick saw it running
            instance.report_runless_asset_event(event)
        record_stopped(instance, KEY, "s", PolicyConfig())
        (latest,) = instance.fetch_observations(dg.AssetKey("stream"), limit=1).records
        assert latest.asset_observation.metadata["state"].value == "stopped" and latest.partition_key == "s"
        alive = dg.AssetCheckKey(KEY, "driver_alive")
        execution = instance.event_log_storage.get_latest_asset_check_execution_by_key([alive])[alive]
        assert execution.status.value == "FAILED"  # stopped on purpose: a warning, its reason says so
        evaluation = execution.event.dagster_event.event_specific_data
        assert evaluation.severity == dg.AssetCheckSeverity.WARN and "stopped" in evaluation.description
