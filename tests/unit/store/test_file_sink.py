"""Spark's file sink log kept in step with batches a state repartition added (which run no sink)."""

import pytest

from dagster_reconf.core.store.file_sink import align_file_sink_log, file_sink_path


def test_file_sink_path_from_its_description():
    assert file_sink_path("FileSink[file:/data/out]") == "file:/data/out"
    assert file_sink_path("FileSink[s3a://bucket/out]") == "s3a://bucket/out"
    assert file_sink_path("ForeachBatchSink") is None and file_sink_path(None) is None


def _stream(tmp_path, sink_batches: int, committed: int):
    """A checkpoint with batches 0..committed committed, and a sink log with entries 0..sink_batches-1 (file f<b> each,
    compacted at 9, 19, ...)."""
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "out" / "_spark_metadata"
    (checkpoint / "commits").mkdir(parents=True)
    log.mkdir(parents=True)
    for batch in range(sink_batches):
        if (batch + 1) % 10:
            (log / str(batch)).write_text(f'v1\n{{"path":"f{batch}"}}')
        else:
            (log / f"{batch}.compact").write_text("v1\n" + "\n".join(f'{{"path":"f{b}"}}' for b in range(batch + 1)))
    for batch in range(committed + 1):
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}")
    return checkpoint, log, f"FileSink[file:{tmp_path / 'out'}]"


def test_committed_batches_the_sink_never_saw_get_empty_entries(tmp_path):
    checkpoint, log, sink = _stream(tmp_path, sink_batches=12, committed=12)  # 12: the repartition's batch
    assert align_file_sink_log(checkpoint, sink).filled == [12]
    assert (log / "12").read_text() == "v1"
    assert not align_file_sink_log(checkpoint, sink)  # idempotent
    assert not align_file_sink_log(checkpoint, "ForeachBatchSink")


@pytest.mark.parametrize("sink_batches", [19, 9])  # after a compaction, and before the first
def test_a_missing_batch_the_sink_compacts_at_gets_the_compaction_of_every_file_before_it(tmp_path, sink_batches):
    checkpoint, log, sink = _stream(tmp_path, sink_batches=sink_batches, committed=sink_batches)
    assert align_file_sink_log(checkpoint, sink).filled == [sink_batches]
    compacted = (log / f"{sink_batches}.compact").read_text().splitlines()
    assert compacted[0] == "v1"
    assert compacted[1:] == [f'{{"path":"f{b}"}}' for b in range(sink_batches)]
    assert not (log / str(sink_batches)).exists()


def test_a_log_compacted_at_another_interval_is_followed(tmp_path):
    checkpoint, log, sink = _stream(tmp_path, sink_batches=0, committed=5)
    (log / "0").write_text('v1\n{"path":"f0"}')
    (log / "1").write_text('v1\n{"path":"f1"}')
    (log / "2.compact").write_text('v1\n{"path":"f0"}\n{"path":"f1"}\n{"path":"f2"}')  # compactInterval 3
    (log / "3").write_text('v1\n{"path":"f3"}')
    (log / "4").write_text('v1\n{"path":"f4"}')
    assert align_file_sink_log(checkpoint, sink).filled == [5]
    assert (log / "5.compact").read_text().splitlines()[1:] == [f'{{"path":"f{b}"}}' for b in range(5)]


def test_empty_entries_past_a_rolled_back_checkpoint_are_removed_so_the_batch_writes_again(tmp_path):
    checkpoint, log, sink = _stream(tmp_path, sink_batches=12, committed=12)
    align_file_sink_log(checkpoint, sink)  # the migration's batch 12 got its empty entry ...
    (checkpoint / "commits" / "12").unlink()  # ... then the migration was rolled back to batch 11
    aligned = align_file_sink_log(checkpoint, sink)
    assert aligned.cleared == [12] and aligned.filled == []
    assert not (log / "12").exists()
    (checkpoint / "commits" / "11").unlink()  # an entry with files is the sink's own: never removed
    assert not align_file_sink_log(checkpoint, sink) and (log / "11").exists()


def test_a_sink_that_never_wrote_is_left_alone(tmp_path):
    (tmp_path / "checkpoint" / "commits").mkdir(parents=True)
    (tmp_path / "checkpoint" / "commits" / "0").write_text("v1\n{}")
    assert not align_file_sink_log(tmp_path / "checkpoint", f"FileSink[file:{tmp_path / 'out'}]")
    assert not (tmp_path / "out").exists()
