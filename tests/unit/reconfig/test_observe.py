"""Downtime, catch-up and event latency of a reconfiguration, from progress records built by hand.

When an event was offered comes from the source's own offsets and backlog (the latest position
at each batch, interpolated), for counter offsets and for a file source's measured backlog alike."""

from datetime import datetime, timezone

import pandas as pd

from dagster_reconf.core.reconfig.observe import committed_batches, normal_backlog, observe_change, offered_rate


def record(batch_id: int, started: float, duration_s: float, start: int, end: int, latest: int) -> dict:
    offset = lambda i: {"index": i}  # noqa: E731
    return {
        "kind": "progress",
        "recorded_at": started + duration_s,
        "progress": {
            "batchId": batch_id,
            "timestamp": datetime.fromtimestamp(started, tz=timezone.utc).isoformat(),
            "durationMs": {"triggerExecution": int(duration_s * 1000)},
            "sources": [{"startOffset": offset(start), "endOffset": offset(end), "latestOffset": offset(latest)}],
        },
    }


def steady(n: int) -> list[dict]:
    """Batches every second that keep up: each ends with the events offered so far."""
    return [record(k, 1000.0 + k, 0.2, 100 * (k - 1), 100 * k, 100 * k) for k in range(1, n + 1)]


def test_committed_batches_know_when_each_oldest_event_was_offered():
    batches = committed_batches([*steady(2), {"kind": "started"}])
    assert list(batches["batch_id"]) == [1, 2]
    assert batches["committed_at"].tolist() == [1001.2, 1002.2]
    # batch 2's oldest event (index 100): the source had offered 100 at 1001 and 200 at 1002, so at 1001.01
    assert round(batches["latency_s"].iloc[1], 3) == 1.19


def test_a_pause_that_the_stream_recovers_from():
    resumed = [
        record(6, 1010.1, 1.4, 500, 1000, 1010),  # the backlog of the pause, at most the per-trigger cap
        record(7, 1012.0, 0.2, 1000, 1120, 1120),  # caught up
    ]
    batches = committed_batches(steady(5) + resumed)
    observed = observe_change(batches, paused_at=1005.5, resumed_at=1010.0, normal=50.0)
    assert observed.pause_s == 4.5
    assert observed.downtime_s == 6.0  # pause to the first commit after the resume (1011.5)
    assert observed.catch_up_s == 1.5  # batch 6 already ends with a backlog (10) below normal (50)
    assert observed.max_event_latency_s == 6.49  # event 500, offered at 1005.01, committed at 1011.5
    assert observed.caught_up and observed.batches_observed == 2


def test_a_stream_still_behind_has_no_catch_up_time():
    behind = [record(6, 1010.1, 1.0, 500, 700, 1010), record(7, 1011.2, 1.0, 700, 900, 1120)]
    observed = observe_change(committed_batches(steady(5) + behind), paused_at=1005.5, resumed_at=1010.0, normal=50.0)
    assert observed.downtime_s == 5.6 and observed.catch_up_s is None and not observed.caught_up


def test_no_batch_after_the_resume_yet():
    observed = observe_change(committed_batches(steady(5)), paused_at=1005.5, resumed_at=1010.0, normal=50.0)
    assert observed.downtime_s is None and observed.batches_observed == 0 and observed.max_event_latency_s is None


def file_record(batch_id: int, started: float, duration_s: float, rows: int, pending_rows: float | None) -> dict:
    """A file source's batch: offsets count files' log entries, the driver measured the unread files' rows."""
    return {
        "kind": "progress",
        "recorded_at": started + duration_s,
        "progress": {
            "batchId": batch_id,
            "timestamp": datetime.fromtimestamp(started, tz=timezone.utc).isoformat(),
            "durationMs": {"triggerExecution": int(duration_s * 1000)},
            "sources": [
                {
                    "description": "FileStreamSource[file:/in]",
                    "startOffset": {"logOffset": batch_id - 1},
                    "endOffset": {"logOffset": batch_id},
                    "latestOffset": None,
                    "numInputRows": rows,
                }
            ],
        },
        "sources": [{"backlog_events": pending_rows} if pending_rows is not None else {}],
    }


def test_a_file_source_is_measured_by_its_unread_files():
    records = [
        file_record(1, 1000.0, 0.5, 100, 0.0),
        file_record(2, 1001.0, 0.5, 100, 0.0),
        file_record(3, 1005.0, 0.5, 100, 300.0),
    ]  # paused from 1001.5 to 1005: 400 rows arrived
    batches = committed_batches(records)
    assert batches["offered"].tolist() == [100.0, 200.0, 600.0]
    # batch 3's oldest row (position 200) arrived right after 1001 (the curve from 200 at 1001 to 600 at 1005)
    assert round(batches["latency_s"].iloc[2], 2) == 4.49
    observed = observe_change(batches, paused_at=1001.5, resumed_at=1004.9, normal=150.0)
    assert observed.downtime_s == 4.0 and not observed.caught_up


def test_an_unknown_backlog_has_no_latency_and_never_counts_as_caught_up():
    batches = committed_batches([file_record(1, 1000.0, 0.5, 100, None), file_record(2, 1001.0, 0.5, 100, None)])
    assert batches["latency_s"].isna().all() and batches["offered"].isna().all()
    observed = observe_change(batches, paused_at=999.0, resumed_at=1000.0, normal=150.0)
    assert observed.max_event_latency_s is None and not observed.caught_up and observed.downtime_s == 1.5


def test_the_offered_rate_comes_from_the_source():
    assert offered_rate(committed_batches(steady(5))) == 100.0
    assert offered_rate(committed_batches([file_record(1, 1000.0, 0.5, 100, None)])) is None


def test_normal_backlog_is_at_least_a_trigger_of_events():
    quiet = pd.DataFrame({"backlog_events": [0, 0, 10]})
    assert normal_backlog(quiet, rate=100.0, trigger_interval_s=0.5) == 100.0  # floor: one second of events
    busy = pd.DataFrame({"backlog_events": [400, 600, 500]})
    assert normal_backlog(busy, rate=100.0, trigger_interval_s=2.0) == 750.0  # 1.5 x the median
    assert normal_backlog(pd.DataFrame({"backlog_events": []}), rate=100.0, trigger_interval_s=2.0) == 200.0
    assert normal_backlog(pd.DataFrame({"backlog_events": []}), rate=None, trigger_interval_s=2.0) == 0.0
