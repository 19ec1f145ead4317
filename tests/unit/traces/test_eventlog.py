import json
import struct

import cramjam
import lz4.block
import pytest
import zstandard

from dagster_reconf.core.traces.eventlog import EventLogError, LogCursor, log_files, read_events

EVENTS = [{"Event": "SparkListenerLogStart", "Spark Version": "4.3.0"}] + [
    {"Event": "SparkListenerTaskEnd", "Stage ID": i, "Task Info": {"Task ID": i}} for i in range(1, 6)
]


def lines(events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def lz4_java(data: bytes, block: int = 64) -> bytes:
    """lz4-java's LZ4BlockOutputStream framing (what Spark's lz4 codec writes)."""
    out = b""
    for lo in range(0, len(data), block):
        chunk = data[lo : lo + block]
        body = lz4.block.compress(chunk, store_size=False)
        out += struct.pack("<8sBiii", b"LZ4Block", 0x20, len(body), len(chunk), 0) + body
    return out + struct.pack("<8sBiii", b"LZ4Block", 0x10, 0, 0, 0)


def snappy_java(data: bytes, block: int = 64) -> bytes:
    """snappy-java's SnappyOutputStream framing (what Spark's snappy codec writes)."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for lo in range(0, len(data), block):
        body = bytes(cramjam.snappy.compress_raw(data[lo : lo + block]))
        out += struct.pack(">i", len(body)) + body
    return out


def zstd_frames(data: bytes, block: int = 64) -> bytes:
    compressor = zstandard.ZstdCompressor()
    return b"".join(compressor.compress(data[lo : lo + block]) for lo in range(0, len(data), block))


@pytest.mark.parametrize(
    "suffix,encode",
    [("", lambda d: d), (".zstd", zstd_frames), (".lz4", lz4_java), (".snappy", snappy_java)],
)
def test_every_codec_reads_all_events(tmp_path, suffix, encode):
    path = tmp_path / f"local-1{suffix}"
    path.write_bytes(encode(lines(EVENTS)))
    result = read_events(path)
    assert result.events == EVENTS
    assert result.cursor.file == path.name and result.skipped == {}


def test_incremental_reads_only_new_lines_and_leave_torn_line(tmp_path):
    path = tmp_path / "local-1.inprogress"
    path.write_bytes(lines(EVENTS[:3]) + b'{"Event": "SparkListenerTa')
    first = read_events(path)
    assert len(first.events) == 3
    path.write_bytes(lines(EVENTS[:3]) + lines(EVENTS[3:]))
    second = read_events(path, first.cursor)
    assert second.events == EVENTS[3:]
    assert read_events(path, second.cursor).events == []


@pytest.mark.parametrize("suffix,encode", [(".zstd", zstd_frames), (".lz4", lz4_java), (".snappy", snappy_java)])
def test_incomplete_compressed_tail_is_left_for_later(tmp_path, suffix, encode):
    full = encode(lines(EVENTS))
    path = tmp_path / f"local-1{suffix}.inprogress"
    path.write_bytes(full[: len(full) * 2 // 3])  # cut inside a compressed block
    partial = read_events(path)
    assert partial.events == EVENTS[: len(partial.events)] and len(partial.events) < len(EVENTS)
    path.write_bytes(full)
    rest = read_events(path, partial.cursor)
    assert partial.events + rest.events == EVENTS


def test_rolling_directory_in_order_across_files_and_rename(tmp_path):
    log = tmp_path / "eventlog_v2_app-1"
    log.mkdir()
    (log / "appstatus_app-1.inprogress").write_text("")
    (log / "events_1_app-1.zstd").write_bytes(zstd_frames(lines(EVENTS[:2])))
    (log / "events_2_app-1.zstd.inprogress").write_bytes(zstd_frames(lines(EVENTS[2:4])))
    assert [p.name for p in log_files(log)] == ["events_1_app-1.zstd", "events_2_app-1.zstd.inprogress"]
    first = read_events(log)
    assert first.events == EVENTS[:4] and first.cursor.file == "events_2_app-1.zstd.inprogress"
    # Spark renames the finished file and starts the next one.
    (log / "events_2_app-1.zstd.inprogress").rename(log / "events_2_app-1.zstd")
    (log / "events_10_app-1.zstd").write_bytes(zstd_frames(lines(EVENTS[4:])))
    second = read_events(log, first.cursor)
    assert second.events == EVENTS[4:]
    assert second.cursor.file == "events_10_app-1.zstd"


def test_max_events_stops_with_cursor_after_them(tmp_path):
    path = tmp_path / "local-1"
    path.write_bytes(lines(EVENTS))
    first = read_events(path, max_events=2)
    rest = read_events(path, first.cursor)
    assert first.events + rest.events == EVENTS


def test_corrupt_lines_are_counted_not_returned(tmp_path):
    path = tmp_path / "local-1"
    path.write_bytes(lines(EVENTS[:2]) + b"{broken\n" + b"[1, 2]\n" + lines(EVENTS[2:]))
    result = read_events(path)
    assert result.events == EVENTS
    assert result.skipped == {"corrupt_line": 1, "not_an_event": 1}


@pytest.mark.parametrize(
    "content,match",
    [
        (b"hello world\n", r"is not a Spark event log: none of its first 1 lines is a Spark listener event"),
        (
            b'{"name": "x"}\n' * 20,
            r"is not a Spark event log: none of its first 10 lines .*\(the first: b'\{\"name\": \"x\"\}'\)",
        ),
    ],
)
def test_not_an_event_log_is_refused(tmp_path, content, match):
    path = tmp_path / "local-1"
    path.write_bytes(content)
    with pytest.raises(EventLogError, match=match):
        read_events(path)


def test_wrong_codec_framing_is_refused(tmp_path):
    path = tmp_path / "local-1.lz4"
    path.write_bytes(lz4.block.compress(lines(EVENTS)))
    with pytest.raises(EventLogError, match=r"not Spark's lz4 codec"):
        read_events(path)


def test_bad_paths_and_cursors(tmp_path):
    with pytest.raises(EventLogError, match=r"does not exist"):
        read_events(tmp_path / "missing")
    with pytest.raises(EventLogError, match=r"not a rolling event log"):
        read_events(tmp_path)
    path = tmp_path / "local-1"
    path.write_bytes(lines(EVENTS))
    with pytest.raises(EventLogError, match=r"cursor names 'local-9', which is not in"):
        read_events(path, LogCursor("local-9", 10))


def test_cursor_round_trip():
    cursor = LogCursor("events_2_app.zstd", 1234)
    assert LogCursor.from_json(cursor.to_json()) == cursor
    assert LogCursor.from_json(None) == LogCursor()
    with pytest.raises(EventLogError, match="unsupported event log cursor version"):
        LogCursor.from_json('{"version": 9}')


# -- the whole-log fast path (read_event_table) -------------------------------------------------------------

TASK_END = {
    "Event": "SparkListenerTaskEnd",
    "Stage ID": 3,
    "Stage Attempt ID": 0,
    "Task End Reason": {"Reason": "Success"},
    "Task Info": {
        "Task ID": 7,
        "Attempt": 0,
        "Launch Time": 1000,
        "Finish Time": 1040,
        "Executor ID": "0",
        "Speculative": False,
        "Killed": False,
        "Accumulables": [{"ID": 1, "Name": "x", "Update": "5"}],
    },
    "Task Metrics": {"Executor Run Time": 30, "Shuffle Read Metrics": {"Fetch Wait Time": 2}},
}
FULL_LOG = [
    {"Event": "SparkListenerLogStart", "Spark Version": "4.3.0"},
    {"Event": "SparkListenerApplicationStart", "App ID": "app-1", "Timestamp": 0},
    {
        "Event": "SparkListenerJobStart",
        "Job ID": 0,
        "Stage IDs": [3],
        "Properties": {"sql.streaming.queryId": "q"},
        "Stage Infos": [{"Stage ID": 3, "Parent IDs": [], "RDD Info": [{"Scope": '{"name": "Exchange"}'}]}],
    },
    {"Event": "SparkListenerTaskStart", "Stage ID": 3, "Task Info": {"Task ID": 7}},
    TASK_END,
]


def table_read(path, cursor=None):
    from dagster_reconf.core.traces.event_schema import EVENT_SCHEMA, USED_EVENTS
    from dagster_reconf.core.traces.event_table import read_event_table

    return read_event_table(path, cursor, schema=EVENT_SCHEMA, used=USED_EVENTS)


@pytest.mark.parametrize("suffix,encode", [("", lambda d: d), (".zstd", zstd_frames)])
def test_a_finished_file_is_read_whole_by_duckdb_as_arrow_reads_a_running_one(tmp_path, monkeypatch, suffix, encode):
    from dagster_reconf.core.traces import event_table

    finished, running = tmp_path / f"app-1{suffix}", tmp_path / f"app-2{suffix}.inprogress"
    for path in (finished, running):
        path.write_bytes(encode(lines(FULL_LOG)))
    arrow = table_read(running)
    monkeypatch.setattr(event_table, "decompressed", lambda path: pytest.fail(f"{path} was decompressed here"))
    whole = table_read(finished)
    assert whole.table.to_pylist() == arrow.table.to_pylist() and whole.table.schema == arrow.table.schema
    assert whole.table.num_rows == 3 and whole.skipped == arrow.skipped == {
        "event not used: SparkListenerLogStart": 1,
        "event not used: SparkListenerTaskStart": 1,
    }
    assert whole.cursor == LogCursor(finished.name, 0, complete=True)
    assert arrow.cursor == LogCursor(running.name, len(lines(FULL_LOG)), complete=False)
    # A finished file is never opened again: not even garbage in its place is read.
    finished.write_bytes(b"garbage")
    assert table_read(finished, whole.cursor).table.num_rows == 0
    assert LogCursor.from_json(whole.cursor.to_json()) == whole.cursor


def test_a_rolling_logs_last_file_is_finished_only_once_its_application_is(tmp_path):
    log = tmp_path / "eventlog_v2_app-1"
    log.mkdir()
    (log / "appstatus_app-1.inprogress").write_text("")
    (log / "events_1_app-1.zstd").write_bytes(zstd_frames(lines(FULL_LOG[:3])))
    (log / "events_2_app-1.zstd").write_bytes(zstd_frames(lines(FULL_LOG[3:])))
    first = table_read(log)
    assert first.table.num_rows == 3 and first.cursor.file == "events_2_app-1.zstd" and not first.cursor.complete
    (log / "appstatus_app-1.inprogress").rename(log / "appstatus_app-1")
    second = table_read(log, first.cursor)
    assert second.table.num_rows == 0 and second.cursor.complete


def test_a_finished_file_with_a_corrupt_line_goes_to_the_line_by_line_reader(tmp_path):
    path = tmp_path / "app-1.zstd"
    path.write_bytes(zstd_frames(lines(FULL_LOG[:2]) + b"{broken\n" + lines(FULL_LOG[2:])))
    assert table_read(path) is None  # normalize_log then counts the line (test_store)
