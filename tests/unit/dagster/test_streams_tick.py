"""One stream's part of the streams sensor's tick, as a plain function: a direction or a reason, without Dagster."""

from dagster_reconf.core.progress.lifecycle import QueryTerminated, Started
from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.health import assess
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.dagster.streams_sensor import StreamRead, stream_tick

from ..scaling.test_admission import python_records
from .test_scaling_tick import BEHIND, SPEC

POLICY = DS2Policy(PolicyConfig(stabilization_s=0))


def test_a_stream_without_a_driver_drops_its_window():
    state = {"offset": 10, "window": {"spec": SPEC}}
    assert stream_tick("s", POLICY, state, None, keep=20, now=100.0).reason == "not running (no driver)"
    assert "window" not in state and state["offset"] == 10


def test_a_stream_behind_points_up_and_reports_its_lag():
    state: dict = {}
    tick = stream_tick("s", POLICY, state, StreamRead(False, BEHIND, 4096), keep=20, now=100.0)
    assert tick.direction == "scale_up" and tick.epoch.startswith("started@")
    assert tick.new_batches and tick.decision.action == "scale_up"
    health = assess("s", "running", tick.window, tick.decision, POLICY.config)
    assert health.state == "running" and health.lag_events > 0 and health.lag_s > 0
    assert health.driver_alive.passed and health.query_healthy.passed
    assert not health.lag_within_band.passed and "falling behind" in health.lag_within_band.reason
    assert health.cores == 1 and health.last_batch_id == tick.window.rows[-1]["batch_id"]
    assert state["offset"] == 4096 and state["window"]["spec"]["name"] == "s"
    quiet = stream_tick("s", POLICY, state, StreamRead(False, [], 4096), keep=20, now=101.0)
    assert not quiet.new_batches, "no new batch: nothing new to observe"


def test_the_drivers_spec_is_asked_only_where_the_metrics_do_not_reach_the_start():
    asked = []

    def status_spec():
        asked.append(True)
        return SPEC

    progress_only = BEHIND[1:]  # started longer ago than the first read reaches
    tick = stream_tick("s", POLICY, {}, StreamRead(False, progress_only, 10, True, status_spec), keep=20, now=100.0)
    assert asked == [True] and tick.reason
    stream_tick("s", POLICY, {}, StreamRead(False, BEHIND, 10, True, status_spec), keep=20, now=100.0)
    assert asked == [True], "the start record says the spec: the driver is not asked"


def test_a_stream_its_own_cap_holds_back_is_said_not_to_keep_up_on_the_tick():
    started = Started(stream="s", spec=SPEC, recorded_at=1796083200.0).to_record()  # 2026-12-01T00:00:00Z
    records = [started, *python_records(admitted=20, batches=12)]
    tick = stream_tick("s", POLICY, {}, StreamRead(False, records, 4096), keep=20, now=1796083212.0)
    assert tick.direction is None and tick.reason.startswith("cannot keep up: ")
    assert "admits 20 events a batch" in tick.reason and "raise it to" in tick.reason
    health = assess("s", "running", tick.window, tick.decision, POLICY.config)
    assert not health.lag_within_band.passed and health.lag_within_band.reason == tick.reason


def test_a_failed_query_and_a_dead_driver_fail_their_checks_and_an_unknown_lag_is_a_warning():
    failed = QueryTerminated(stream="s", run_id="r1", exception="java.lang.OutOfMemoryError: Java heap space")
    state: dict = {}
    tick = stream_tick("s", POLICY, state, StreamRead(False, [*BEHIND, failed.to_record()], 4096), keep=20, now=100.0)
    health = assess("s", "running", tick.window, tick.decision, POLICY.config)
    assert health.state == "query failed" and health.driver_alive.passed
    assert not health.query_healthy.passed and "OutOfMemoryError" in health.query_healthy.reason
    dead = assess("s", "died", None, None, POLICY.config)
    assert dead.state == "died" and not dead.driver_alive.passed and not dead.driver_alive.warning
    lag = dead.lag_within_band
    assert not lag.passed and lag.warning and lag.reason.startswith("not judged"), "an unknown lag is never in band"
    stopped = assess("s", "not running", None, None, POLICY.config)
    assert not stopped.driver_alive.passed and stopped.driver_alive.warning, "a stop on purpose is a warning"
