"""Unplanned failures onto the audit record: read from lifecycle records and a supervisor's death report, once each."""

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.progress.lifecycle import QueryStarted, QueryTerminated
from dagster_reconf.core.reconfig.incidents import driver_died, query_failures, record_incidents

SPARK_ERROR = """[STREAM_FAILED] Query [id = 1, runId = r2] terminated with exception: boom SQLSTATE: XXKST
\tat org.apache.spark.sql.execution.streaming.StreamExecution.runStream(StreamExecution.scala:1)
Traceback (most recent call last):
  File "/app/job.py", line 3, in write
    raise ValueError("bad record 7")
ValueError: bad record 7"""


def records():
    return [
        {"kind": "progress", "progress": {"batchId": 3}},
        QueryStarted(stream="s", run_id="r1").to_record(),
        QueryTerminated(stream="s", run_id="r1", recorded_at=10.0).to_record(),  # a clean stop: no incident
        QueryStarted(stream="s", run_id="r2").to_record(),
        QueryTerminated(stream="s", run_id="r2", exception=SPARK_ERROR, recorded_at=20.0).to_record(),
        {"kind": "lifecycle", "event": "query_terminated"},  # damaged (no stream): skipped
    ]


def test_failed_query_runs_are_incidents_with_the_error_in_one_line_and_the_whole_trace():
    (incident,) = query_failures("s", records())
    assert (incident.kind, incident.key, incident.at) == ("query_failed", "r2", 20.0)
    assert incident.error == "ValueError: bad record 7" and incident.trace == SPARK_ERROR


def test_a_dead_driver_is_an_incident_keyed_by_its_pid():
    assert driver_died("s", None) == []
    (incident,) = driver_died("s", {"pid": 4242, "last_seen_at": 30.0})
    assert (incident.kind, incident.key, incident.at) == ("driver_died", "4242", 30.0)
    assert "reconf stream start" in incident.error


def test_each_incident_is_recorded_once_per_stream(tmp_path):
    ledger = AuditLedger(default_ledger_url(tmp_path))
    found = query_failures("s", records()) + driver_died("s", {"pid": 4242, "last_seen_at": 30.0})
    added = record_incidents(ledger, found + found)
    assert [(r.kind, r.payload["key"]) for r in added] == [("query_failed", "r2"), ("driver_died", "4242")]
    assert record_incidents(ledger, found) == []
    other = record_incidents(ledger, query_failures("t", records()))  # the same run id on another stream
    assert [(r.stream, r.kind) for r in other] == [("t", "query_failed")]
    assert ledger.verify().ok and ledger.verify().records == 3


class DeadStream:
    """What stream_incidents reads of a stream: its metrics store and whether its driver died."""

    def __init__(self, home):
        from dagster_reconf.core.store.paths import StreamPaths

        self.name, self.paths = "s", StreamPaths(home, "s")
        self.paths.create()

    def metrics(self):
        from dagster_reconf.core.store.metrics import MetricsStore

        return MetricsStore(self.paths.metrics)

    def driver_death(self):
        return {"pid": 7, "last_seen_at": 1.0}


def test_a_streams_incidents_come_from_its_metrics_store_and_its_driver(tmp_path):
    from dagster_reconf.core.reconfig.incidents import stream_incidents
    from dagster_reconf.core.store.metrics import MetricsStore

    stream = DeadStream(tmp_path)
    for record in records()[:5]:
        MetricsStore(stream.paths.metrics).append(record)
    assert [(i.kind, i.key) for i in stream_incidents(stream)] == [("query_failed", "r2"), ("driver_died", "7")]
    with stream.paths.metrics.open("a") as damaged:
        damaged.write("not json\n{}\n")
    assert [i.kind for i in stream_incidents(stream)] == ["driver_died"], "a damaged store hides no dead driver"
