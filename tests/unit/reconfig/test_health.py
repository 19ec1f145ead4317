"""The health gate's verdict from a resumed stream's status and its committed batches."""

import pandas as pd

from dagster_reconf.core.reconfig.health import resumed_health

RUNNING = {"state": "running", "query_status": "Processing new data"}


def batches(*rows):
    return pd.DataFrame(rows, columns=["committed_at", "end"])


def verdict(status, frame, time_is_up=False):
    return resumed_health(status, frame, paused_at=10.0, resumed_at=20.0, time_is_up=time_is_up)


def test_two_batches_that_moved_the_sources_pass():
    assert verdict(RUNNING, batches((9, 100), (21, 120), (22, 140))).verdict == "healthy"


def test_a_failed_query_fails_at_once_with_sparks_first_line():
    failed = {"state": "failed", "failure": "org.apache.spark.SparkException: boom\n\tat x.y(Z.scala:1)"}
    health = verdict(failed, batches((9, 100)))
    assert (
        health.verdict == "failed"
        and health.problem == "the resumed query failed: org.apache.spark.SparkException: boom"
    )
    assert "Z.scala" in health.error


def test_a_stopped_query_fails():
    assert verdict({"state": "stopped"}, batches()).problem == "the resumed query is stopped, not running"


def test_too_few_batches_wait_then_fail_unless_the_query_waits_for_data():
    one = batches((9, 100), (21, 120))
    assert verdict(RUNNING, one).verdict == "waiting"
    assert "1 batch(es) committed since the resume, 2 needed" in verdict(RUNNING, one, time_is_up=True).problem
    idle = {**RUNNING, "query_status": "Waiting for data to arrive"}
    assert verdict(idle, one, time_is_up=True).verdict == "idle"
    waiting = {**RUNNING, "query_status": "Waiting for next trigger", "query_idle": True}
    assert resumed_health(waiting, one, paused_at=10, resumed_at=20, time_is_up=False, now=22).verdict == "waiting"
    assert resumed_health(waiting, one, paused_at=10, resumed_at=20, time_is_up=False, now=26).verdict == "idle"


def test_sources_that_did_not_move_past_the_pause_fail_when_time_is_up():
    stuck = batches((9, 100), (21, 100), (22, 100))
    assert verdict(RUNNING, stuck).verdict == "waiting"
    assert "did not move past 100" in verdict(RUNNING, stuck, time_is_up=True).problem
    no_positions = batches((9, None), (21, None), (22, None))
    assert verdict(RUNNING, no_positions).verdict == "healthy"
