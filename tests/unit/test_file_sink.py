"""Spark's file sink log kept in step with batches a state repartition added (which run no sink)."""

from dagster_reconf.core.file_sink import align_file_sink_log, file_sink_path


def test_file_sink_path_from_its_description():
    assert file_sink_path("FileSink[file:/data/out]") == "file:/data/out"
    assert file_sink_path("FileSink[s3a://bucket/out]") == "s3a://bucket/out"
    assert file_sink_path("ForeachBatchSink") is None and file_sink_path(None) is None


def test_committed_batches_the_sink_never_saw_get_empty_entries(tmp_path):
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    (checkpoint / "commits").mkdir(parents=True)
    (output / "_spark_metadata").mkdir(parents=True)
    for batch in range(12):  # batch 12 is the repartition's: committed, never written by the sink
        (output / "_spark_metadata" / (f"{batch}.compact" if batch == 9 else str(batch))).write_text('v1\n{"path":"x"}')
    for batch in range(13):
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}")
    assert align_file_sink_log(checkpoint, f"FileSink[file:{output}]") == [12]
    assert (output / "_spark_metadata" / "12").read_text() == "v1"
    assert align_file_sink_log(checkpoint, f"FileSink[file:{output}]") == []  # idempotent
    assert align_file_sink_log(checkpoint, "ForeachBatchSink") == []


def test_a_sink_that_never_wrote_is_left_alone(tmp_path):
    (tmp_path / "checkpoint" / "commits").mkdir(parents=True)
    (tmp_path / "checkpoint" / "commits" / "0").write_text("v1\n{}")
    assert align_file_sink_log(tmp_path / "checkpoint", f"FileSink[file:{tmp_path / 'out'}]") == []
    assert not (tmp_path / "out").exists()
