"""Downtime, catch-up and event latency of a reconfiguration, from progress records built by hand."""

from datetime import datetime, timezone

import pandas as pd

from dagster_reconf.core.reconfig.observe import committed_batches, normal_backlog, observe_change

RATE = 100.0  # events offered per second since the anchor
ANCHOR = {"start_time": 1000.0, "start_index": 0}


def record(batch_id: int, started: float, duration_s: float, start: int, end: int, latest: int) -> dict:
    offset = lambda i: {"index": i}  # noqa: E731
    return {"kind": "progress", "recorded_at": started + duration_s, "progress": {
        "batchId": batch_id, "timestamp": datetime.fromtimestamp(started, tz=timezone.utc).isoformat(),
        "durationMs": {"triggerExecution": int(duration_s * 1000)},
        "sources": [{"startOffset": offset(start), "endOffset": offset(end), "latestOffset": offset(latest)}]}}


def steady(n: int) -> list[dict]:
    """Batches every second that keep up: each ends with the events offered so far."""
    return [record(k, 1000.0 + k, 0.2, 100 * (k - 1), 100 * k, 100 * k) for k in range(1, n + 1)]


def test_committed_batches_know_when_each_oldest_event_was_offered():
    batches = committed_batches([*steady(2), {"kind": "started"}], ANCHOR, RATE)
    assert list(batches["batch_id"]) == [1, 2]
    assert batches["committed_at"].tolist() == [1001.2, 1002.2]
    # batch 2's oldest event (index 100) was offered at 1000 + 101/100 = 1001.01
    assert round(batches["latency_s"].iloc[1], 3) == 1.19


def test_a_pause_that_the_stream_recovers_from():
    resumed = [
        record(6, 1010.1, 1.4, 500, 1000, 1010),   # the backlog of the pause, at most the per-trigger cap
        record(7, 1012.0, 0.2, 1000, 1120, 1120),  # caught up
    ]
    batches = committed_batches(steady(5) + resumed, ANCHOR, RATE)
    observed = observe_change(batches, paused_at=1005.5, resumed_at=1010.0, normal=50.0)
    assert observed.pause_s == 4.5
    assert observed.downtime_s == 6.0  # pause to the first commit after the resume (1011.5)
    assert observed.catch_up_s == 1.5  # batch 6 already ends with a backlog (10) below normal (50)
    assert observed.max_event_latency_s == 6.49  # event 500, offered at 1005.01, committed at 1011.5
    assert observed.caught_up and observed.batches_observed == 2


def test_a_stream_still_behind_has_no_catch_up_time():
    behind = [record(6, 1010.1, 1.0, 500, 700, 1010), record(7, 1011.2, 1.0, 700, 900, 1120)]
    observed = observe_change(committed_batches(steady(5) + behind, ANCHOR, RATE), paused_at=1005.5, resumed_at=1010.0,
                              normal=50.0)
    assert observed.downtime_s == 5.6 and observed.catch_up_s is None and not observed.caught_up


def test_no_batch_after_the_resume_yet():
    observed = observe_change(committed_batches(steady(5), ANCHOR, RATE), paused_at=1005.5, resumed_at=1010.0, normal=50.0)
    assert observed.downtime_s is None and observed.batches_observed == 0 and observed.max_event_latency_s is None


def test_normal_backlog_is_at_least_a_trigger_of_events():
    quiet = pd.DataFrame({"backlog_events": [0, 0, 10]})
    assert normal_backlog(quiet, rate=100.0, trigger_interval_s=0.5) == 100.0  # floor: one second of events
    busy = pd.DataFrame({"backlog_events": [400, 600, 500]})
    assert normal_backlog(busy, rate=100.0, trigger_interval_s=2.0) == 750.0  # 1.5 x the median
    assert normal_backlog(pd.DataFrame({"backlog_events": []}), rate=100.0, trigger_interval_s=2.0) == 200.0
