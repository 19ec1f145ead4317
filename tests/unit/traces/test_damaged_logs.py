"""Damaged event logs never crash the reader: everything readable is kept, what is not is counted with its reason.

The regression (issue 16): one ``SparkListenerTaskEnd`` line cut mid-JSON in the middle of a plain log made
ingestion fail with pyarrow's ``ArrowInvalid`` from the columnar task parse."""

import json

import pytest

from dagster_reconf.core.traces.eventlog import EventLogError, read_events
from dagster_reconf.core.traces.store import TraceStore, normalize_log

from .test_eventlog import lz4_java, snappy_java, zstd_frames
from .test_store import JOB, events, task

TASKS = [task(i, i % 2, 1000 + 40 * (i // 2)) for i in range(40)]


def log_lines() -> list[bytes]:
    return [json.dumps(e).encode() for e in [*events()[:4], *TASKS]]


def tasks_of(table) -> set[int]:
    return set(table.loc[table["src_worker"].isna(), "task_id"])


def test_a_task_end_line_cut_mid_json_is_counted_and_the_rest_kept(tmp_path):
    lines = log_lines()
    cut = 4 + 20  # the 21st task's line
    lines[cut] = lines[cut][: len(lines[cut]) // 2]
    path = tmp_path / "app-1"
    path.write_bytes(b"\n".join(lines) + b"\n")
    rows, _, read = normalize_log(path)
    assert tasks_of(rows) == set(range(40)) - {20}
    assert read.skipped.get("corrupt_line", 0) + _normalizer_skips(path).get("corrupt_line", 0) == 1


def _normalizer_skips(path):
    _, normalizer, _ = normalize_log(path)
    return normalizer.skipped


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: line[:-7] + b"\xff\xfe" + line[-5:],  # invalid UTF-8
        lambda line: line.replace(b'"Task ID": 7', b'"Task ID": "seven"'),  # a field of another type
        lambda line: line.replace(b'"Launch Time"', b'"Launch Tim\\u0000"'),  # a flipped key
        lambda line: b"\x00garbage\x01 " * 3,  # garbage
        lambda line: (
            b'{"Event": "SparkListenerTaskEnd", "Stage ID": null, "Task Info": null}'
        ),  # JSON, not as Spark writes
    ],
)
def test_a_damaged_task_line_never_raises(tmp_path, damage):
    lines = log_lines()
    lines[4 + 7] = damage(lines[4 + 7])
    path = tmp_path / "app-1"
    path.write_bytes(b"\n".join(lines) + b"\n")
    store = TraceStore(tmp_path / "traces")
    report = store.ingest(tmp_path)
    assert report.events + sum(report.skipped.values()) >= len(lines)  # every line used or counted with its reason
    assert tasks_of(store.activities(0, 1e9)) >= set(range(40)) - {7}


def test_malformed_job_and_stage_events_are_counted(tmp_path):
    broken_job = {**JOB, "Job ID": None}
    lines = [
        json.dumps(e).encode() for e in [*events()[:3], broken_job, {"Event": "SparkListenerStageSubmitted"}, *TASKS]
    ]
    path = tmp_path / "app-1"
    path.write_bytes(b"\n".join(lines) + b"\n")
    _, normalizer, read = normalize_log(path)
    skipped = {**read.skipped, **normalizer.skipped}
    assert skipped.get("malformed event: SparkListenerJobStart") == 1
    assert skipped.get("malformed event: SparkListenerStageSubmitted") == 1
    assert skipped.get("task of a stage never submitted") == 40  # the job that would have named their stages is gone


@pytest.mark.parametrize(("suffix", "encode"), [(".zstd", zstd_frames), (".lz4", lz4_java)])
def test_a_damaged_block_in_the_middle_is_skipped_to_the_next(tmp_path, suffix, encode):
    data = bytearray(encode(b"\n".join(log_lines()) + b"\n"))
    middle = len(data) // 2
    data[middle : middle + 6] = b"\x00\x11\x22\x33\x44\x55"
    path = tmp_path / f"app-1{suffix}"
    path.write_bytes(bytes(data))
    result = read_events(path)
    assert result.skipped.get("damaged compressed block", 0) >= 1 or result.skipped.get("corrupt_line", 0) >= 1
    assert len(result.events) > len(log_lines()) // 3  # what precedes and follows the damage is kept


@pytest.mark.parametrize(
    ("suffix", "encode"), [("", lambda d: d), (".zstd", zstd_frames), (".lz4", lz4_java), (".snappy", snappy_java)]
)
def test_a_finished_log_cut_short_keeps_its_head(tmp_path, suffix, encode):
    data = encode(b"\n".join(log_lines()) + b"\n")
    path = tmp_path / f"app-1{suffix}"
    path.write_bytes(data[: int(len(data) * 0.6)])
    result = read_events(path)
    assert 0 < len(result.events) < len(log_lines()) and result.cursor.complete
    assert any(reason.startswith(("truncated", "corrupt")) for reason in result.skipped), result.skipped
    assert read_events(path, result.cursor).events == []  # a finished file is not read again


def test_an_empty_file_and_a_file_that_is_not_a_log(tmp_path):
    (tmp_path / "app-1").write_bytes(b"")
    assert read_events(tmp_path / "app-1").events == []
    (tmp_path / "app-2").write_bytes(b"PK\x03\x04 a zip file, not a log\n" * 3)
    with pytest.raises(EventLogError, match="is not a Spark event log"):
        read_events(tmp_path / "app-2")
    (tmp_path / "app-3").write_bytes(b"\n".join(log_lines()) + b"\n")
    report = TraceStore(tmp_path / "traces").ingest(tmp_path)  # the stray file is reported, the real log read
    assert report.activities > 0 and report.skipped.get("not an event log: app-2") == 1
