"""What a stop and restart does to a stream's data, from Spark's own source and sink descriptions."""

import pytest

from dagster_reconf.core.progress.delivery import delivery, sink_kind

SOURCES = {
    "file": "FileStreamSource[file:/data/in]",
    "kafka": "KafkaV2[Subscribe[orders]]",
    "rate": "RateStreamV2[rowsPerSecond=5, rampUpTimeSeconds=0, numPartitions=default",
    "rate-micro-batch": "RatePerMicroBatchStream[rowsPerBatch=5, numPartitions=1, startTimestamp=0]",
    "python": "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStreamWithAdmissionControl@1",
    "socket": "TextSocketV2[host: localhost, port: 9999]",
    "memory": "MemoryStream[value#3]",
    "unknown": "com.acme.QueueStream@5",
}
SINKS = {
    "file": "FileSink[file:/out]",
    "foreachBatch": "ForeachBatchSink",
    "console": "org.apache.spark.sql.execution.streaming.ConsoleTable$@1a2b",
    "memory": "MemorySink",
    "kafka": "org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@3c4d",
    "foreach": "ForeachWriterTable(org.apache.spark.sql.ForeachWriter@5)",
    "noop": "org.apache.spark.sql.execution.datasources.noop.NoopTable$@6",
}


def progress(source: str, sink: str = "file") -> dict:
    return {"sources": [{"description": SOURCES[source]}], "sink": {"description": SINKS[sink]}}


@pytest.mark.parametrize("kind", list(SINKS))
def test_sinks_are_named_by_kind(kind):
    assert sink_kind(SINKS[kind]) == kind


@pytest.mark.parametrize("source", ["file", "kafka", "rate", "rate-micro-batch", "python"])
def test_sources_that_resume_exactly_restart_with_the_sinks_guarantee(source):
    found = delivery(progress(source))
    assert found.restartable and found.problems == [] and found.guarantee == "exactly-once"
    assert found.sources == [source] and found.sink == "file"
    assert delivery(progress(source, "kafka")).guarantee == "at-least-once"
    assert "idempotent" in delivery(progress(source, "foreachBatch")).guarantee


def test_a_source_of_unknown_kind_is_refused_with_the_fix():
    found = delivery(progress("unknown"))
    assert not found.restartable and found.guarantee == "none (see problems)"
    (problem,) = found.problems
    assert problem.startswith("unknown source cannot resume exactly") and "com.acme.QueueStream" in problem
    assert "accept_loss=True" in problem and "replayable=True" in problem


def test_an_accepted_loss_restarts_and_says_what_it_loses():
    found = delivery(progress("unknown"), accept_loss=True)
    assert found.restartable and found.loss_accepted and found.guarantee.startswith("at-most-once")
    assert not delivery(progress("file"), accept_loss=True).loss_accepted, "nothing to accept where nothing is lost"


@pytest.mark.parametrize("source", ["socket", "memory"])
def test_sources_that_never_restart_are_refused_whatever_the_spec_or_definition_says(source):
    for found in (delivery(progress(source)), delivery(progress(source), replayable=True, accept_loss=True)):
        assert not found.restartable and not found.loss_accepted
        (problem,) = found.problems
        assert problem.startswith(f"{source} source cannot restart from a checkpoint")
        assert "Neither accept_loss nor replayable=True" in problem
        assert found.guarantee == f"at-most-once ({source} input is lost whenever the query stops)"


def test_a_declared_replayable_definition_is_positive_evidence():
    assert delivery(progress("unknown"), replayable=True).restartable
    assert not delivery(progress("unknown"), replayable=False).restartable


def test_the_memory_sink_cannot_restart_even_with_loss_accepted():
    found = delivery(progress("file", "memory"), accept_loss=True)
    assert not found.restartable and "memory sink" in found.problems[0]


def test_no_batch_yet_means_nothing_is_known():
    found = delivery(None)
    assert not found.restartable and "no batch has run yet" in found.problems[0]
