import dataclasses

import pytest

from dagster_reconf.core.progress.lifecycle import (
    ExecutorsResized,
    FileSinkLogAligned,
    LifecycleEvent,
    Paused,
    PythonTaskCpuFailed,
    QueryStarted,
    QueryTerminated,
    Restarted,
    SettingsKnown,
    Started,
    Stopped,
    lifecycle_event,
    query_end,
)

SPEC = {"name": "orders", "cores": 2}

EVENTS: list[LifecycleEvent] = [
    Started(stream="orders", spec=SPEC, run_id="r1", query_id="q1", app={"name": "a", "id": "app-1"}),
    Restarted(stream="orders", spec=SPEC, scope="executors", changes={"cores": 4}, seconds=1.5),
    SettingsKnown(stream="orders", spec=SPEC),
    Stopped(stream="orders", last_committed_batch=7, seconds=0.4, attempts=2, finished_batch=7),
    Paused(stream="orders", reconfiguration_id="rc-1", lead_s=3.25),
    QueryStarted(stream="orders", run_id="r1", query_id="q1"),
    QueryTerminated(stream="orders", run_id="r1", exception="boom"),
    ExecutorsResized(stream="orders", wanted=2, before=1, after=2, removed=[], seconds=3.0),
    PythonTaskCpuFailed(stream="orders", error="no worker"),
    FileSinkLogAligned(stream="orders", batches=[8], cleared=[]),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_lifecycle_event_round_trips_through_its_record(event):
    record = event.to_record()
    assert record["kind"] == "lifecycle" and record["stream"] == "orders" and record["event"] == event.EVENT
    assert "recorded_at" not in record, "the store stamps the time when the writer has none"
    stored = {"recorded_at": 1700000000.5, **record}  # as MetricsStore.append writes it
    assert lifecycle_event(stored) == dataclasses.replace(event, recorded_at=1700000000.5)


def test_lifecycle_event_reads_records_written_as_dict_literals():
    """Stores written before the typed records hold the same keys: they read the same."""
    old = {"recorded_at": 5.0, "kind": "lifecycle", "stream": "s", "event": "restarted", "scope": "query",
           "changes": {"trigger_interval": "2 seconds"}, "seconds": 2.0, "spec": SPEC}  # fmt: skip
    assert lifecycle_event(old) == Restarted(
        stream="s", recorded_at=5.0, scope="query", changes={"trigger_interval": "2 seconds"}, seconds=2.0, spec=SPEC
    )


@pytest.mark.parametrize(
    "record",
    [
        {"kind": "progress", "stream": "s", "progress": {}},
        {"kind": "lifecycle", "stream": "s", "event": "from_a_newer_version"},
        {"kind": "lifecycle", "stream": "s", "event": "paused"},  # its reconfiguration id is missing
        {"kind": "lifecycle", "event": "started", "spec": SPEC},  # no stream
    ],
    ids=["progress", "unknown-event", "missing-field", "no-stream"],
)
def test_lifecycle_event_skips_what_is_not_a_known_whole_event(record):
    assert lifecycle_event(record) is None


def test_event_time_given_by_the_writer_is_kept():
    assert Started(stream="s", spec=SPEC, recorded_at=12.0).to_record()["recorded_at"] == 12.0


def test_a_query_has_ended_until_it_starts_again():
    ended = QueryTerminated(stream="s", run_id="r1", exception="boom", recorded_at=12.5).to_record()
    progress = {"kind": "progress", "stream": "s", "progress": {}}
    assert query_end([]) is None
    assert query_end([ended, progress]) == QueryTerminated(stream="s", run_id="r1", exception="boom", recorded_at=12.5)
    assert query_end([ended, Started(stream="s", spec={}).to_record()]) is None
    assert query_end([{"kind": "lifecycle", "event": "query_terminated"}]) is None  # no stream: damaged, skipped


def test_the_late_end_of_a_run_before_a_restart_does_not_end_the_new_run():
    # Spark tells its listeners of a start at once, of an end later: a restart can record the new run first.
    old_end = QueryTerminated(stream="s", run_id="r1").to_record()
    new_start = QueryStarted(stream="s", run_id="r2").to_record()
    assert query_end([QueryStarted(stream="s", run_id="r1").to_record(), new_start, old_end]) is None
    assert query_end([new_start, old_end, QueryTerminated(stream="s", run_id="r2").to_record()]).run_id == "r2"
