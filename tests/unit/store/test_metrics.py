import json
import multiprocessing

import pytest

from dagster_reconf.core.store.metrics import MetricsStore, progress_frame, progress_row, status_figures

PROGRESS = {
    "name": "s1",
    "batchId": 7,
    "timestamp": "2026-11-21T10:00:00.000Z",
    "numInputRows": 3000,
    "inputRowsPerSecond": 2999.5,
    "processedRowsPerSecond": 4100.0,
    "durationMs": {"triggerExecution": 731, "addBatch": 600},
    "eventTime": {"watermark": "2026-01-01T00:00:08.000Z"},
    "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 1234}],
    "sources": [{"startOffset": {"index": 18000}, "endOffset": {"index": 21000}, "latestOffset": {"index": 25500}}],
}


def test_append_then_read_incrementally(tmp_path):
    store = MetricsStore(tmp_path / "m.jsonl")
    store.append({"kind": "progress", "progress": PROGRESS})
    records, cursor = store.read()
    assert [r["progress"]["batchId"] for r in records] == [7]
    assert store.read(cursor) == ([], cursor)
    store.append({"kind": "lifecycle", "event": "stopped"})
    records, cursor2 = store.read(cursor)
    assert [r["event"] for r in records] == ["stopped"] and cursor2 > cursor


def test_torn_last_line_is_left_for_next_read(tmp_path):
    path = tmp_path / "m.jsonl"
    store = MetricsStore(path)
    store.append({"kind": "progress", "progress": PROGRESS})
    with open(path, "a") as fh:
        fh.write('{"kind": "progress", "progr')
    records, cursor = store.read()
    assert len(records) == 1
    with open(path, "a") as fh:
        fh.write('ess": {}}\n')
    records, _ = store.read(cursor)
    assert records == [{"kind": "progress", "progress": {}}]


def test_corrupt_complete_line_raises_with_position(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"kind": "progress"}\nnot json\n')
    with pytest.raises(ValueError, match=r"m.jsonl is corrupt at byte 21"):
        MetricsStore(path).read()


def test_missing_store_reads_empty(tmp_path):
    assert MetricsStore(tmp_path / "none.jsonl").read(5) == ([], 5)


def test_progress_row_derives_backlog_and_state():
    row = progress_row(PROGRESS)
    assert row["backlog_events"] == 4500
    assert row["end_offset"] == 21000
    assert row["events"] == 3000
    assert row["state_rows"] == 1234 and row["state_rows.stateStoreSave"] == 1234
    assert row["batch_duration_ms"] == 731


def test_progress_row_accepts_offsets_as_json_text():
    text = {
        **PROGRESS,
        "sources": [
            {
                "description": "PythonMicroBatchStreamWithAdmissionControl@1",
                "startOffset": json.dumps({"index": 4}),
                "endOffset": json.dumps({"index": 10}),
                "latestOffset": "null",
            }
        ],
    }
    row = progress_row(text)
    assert row["end_offset"] == 10 and row["events"] == 6 and row["backlog_events"] is None
    assert row["source_kinds"] == "python" and row["latest_offset"] is None


def test_a_socket_source_counts_rows_and_says_why_its_backlog_is_unknown():
    socket = {
        **PROGRESS,
        "sources": [
            {
                "description": "TextSocketV2[host: localhost, port: 9999]",
                "startOffset": 3,
                "endOffset": 5,
                "numInputRows": 17,
            }
        ],
    }
    row = progress_row(socket)
    assert row["events"] == 17 and row["backlog_events"] is None and row["source_kinds"] == "socket"
    assert "socket source keeps no offsets" in row["backlog_unknown"]
    # with a latest offset too (as Spark reports it), it is still a socket, its backlog unknown: no "python", no 0
    socket["sources"][0]["latestOffset"] = 9
    row = progress_row(socket)
    assert (row["source_kinds"], row["events"], row["backlog_events"]) == ("socket", 17, None)


def test_progress_frame_orders_by_batch_and_skips_lifecycle_records():
    frame = progress_frame(
        [
            {"kind": "progress", "progress": {**PROGRESS, "batchId": 9}},
            {"kind": "lifecycle"},
            {"kind": "progress", "progress": PROGRESS},
        ]
    )
    assert frame["batch_id"].tolist() == [7, 9]


def test_last_progress_reads_from_the_end(tmp_path, monkeypatch):
    import dagster_reconf.core.store.metrics as metrics

    monkeypatch.setattr(metrics, "_TAIL_CHUNK_BYTES", 64)  # force several windows
    store = MetricsStore(tmp_path / "m.jsonl")
    assert store.last_progress() is None
    for batch in range(5):
        store.append({"kind": "progress", "progress": {**PROGRESS, "batchId": batch}})
    store.append({"kind": "lifecycle", "event": "stopped", "padding": "x" * 300})
    with open(store.path, "a") as fh:
        fh.write('{"kind": "progress", "progress": {"batchId": 99')  # torn: being written
    assert store.last_progress()["progress"]["batchId"] == 4
    only_lifecycle = MetricsStore(tmp_path / "l.jsonl")
    only_lifecycle.append({"kind": "lifecycle", "event": "started"})
    assert only_lifecycle.last_progress() is None


def test_status_figures_project_one_batch():
    figures = status_figures({"kind": "progress", "progress": PROGRESS})
    assert figures["batch_id"] == 7 and figures["backlog_events"] == 4500
    assert figures["state_rows"] == {"stateStoreSave": 1234}
    assert status_figures(None)["batch_id"] is None and status_figures(None)["state_rows"] == {}


def test_an_event_logs_progress_gives_its_totals_through_its_sources():
    """Spark's event log writes a progress without numInputRows and the rates at the top: its sources carry them."""
    logged = {
        k: v for k, v in PROGRESS.items() if k not in ("numInputRows", "inputRowsPerSecond", "processedRowsPerSecond")
    }
    logged["sources"] = [
        {**PROGRESS["sources"][0], "numInputRows": 3000, "inputRowsPerSecond": 2999.5, "processedRowsPerSecond": "NaN"}
    ]
    row = progress_row(logged)
    assert row["num_input_rows"] == 3000 and row["input_rows_per_second"] == 2999.5


def _segment_files(path):
    return sorted(
        p.name for p in path.parent.iterdir() if p.name.startswith(path.name) and not p.name.endswith(".lock")
    )


def _ticked(path, ticks: int, **segments) -> MetricsStore:
    """A store at ``path`` with ``ticks`` lifecycle records numbered from 0 (``segments``: its segment options)."""
    store = MetricsStore(path, **segments)
    for i in range(ticks):
        store.append({"kind": "lifecycle", "event": "tick", "i": i})
    return store


def test_segments_are_cut_and_a_following_reader_sees_every_record_once(tmp_path):
    path = tmp_path / "m.jsonl"
    store = MetricsStore(path, segment_bytes=1_000, kept_segments=2)
    seen, cursor = [], 0
    for i in range(200):
        store.append({"kind": "lifecycle", "event": "tick", "i": i})
        records, cursor = store.read(cursor)
        seen += [r["i"] for r in records]
    assert seen == list(range(200))
    assert cursor == store.size() and len(_segment_files(path)) == 3  # two sealed, the active one
    assert MetricsStore(path).read(cursor) == ([], cursor)  # a cursor stays valid for another reader


def test_a_cut_killed_after_sealing_is_finished_by_the_next_append(tmp_path):
    path = tmp_path / "m.jsonl"
    store = _ticked(path, 30, segment_bytes=1_000, kept_segments=5)
    records, cursor = store.read(0)
    end = store.size()
    # Killed between sealing the active segment and writing the next one's header.
    path.rename(path.with_name(f"{path.name}.{MetricsStore(path).segments()[-1][0]:015d}"))
    assert store.read(cursor) == ([], end)
    store.append({"kind": "lifecycle", "event": "tick", "i": 30})
    more, _ = store.read(cursor)
    assert [r["i"] for r in more] == [30], "offsets go on after the sealed segments, not from 0"
    assert [r["i"] for r in store.read(0)[0] if r.get("event") == "tick"] == list(range(31))


def test_a_cursor_into_a_removed_segment_resumes_at_the_oldest_record_kept(tmp_path):
    path = tmp_path / "m.jsonl"
    store = _ticked(path, 100, segment_bytes=1_000, kept_segments=1)
    records, cursor = store.read(0)
    kept = [r["i"] for r in records]
    assert kept == list(range(kept[0], 100)) and 0 < kept[0] < 90 and cursor == store.size()
    assert all(r.get("kind") != "segment" for r in records)


def test_tail_offset_and_last_progress_reach_into_sealed_segments(tmp_path):
    path = tmp_path / "m.jsonl"
    store = MetricsStore(path, segment_bytes=3_000, kept_segments=4)
    for i in range(12):
        store.append({"kind": "progress", "progress": {**PROGRESS, "batchId": i}})
    store.append({"kind": "lifecycle", "event": "stopped"})
    assert store.last_progress()["progress"]["batchId"] == 11
    sealed = len(_segment_files(path))
    while len(_segment_files(path)) == sealed:  # lifecycle records until the active segment is cut
        store.append({"kind": "lifecycle", "event": "tick"})
    assert store.last_progress()["progress"]["batchId"] == 11  # the active segment holds no progress now
    records, _ = store.read(store.tail_offset(2_500))
    assert records and all("kind" in r for r in records)  # starts at a line start, across the cut
    assert store.read(store.tail_offset(10**9))[0] == store.read(0)[0]


def test_a_store_from_before_segments_reads_from_byte_zero_and_is_cut_on(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"kind": "lifecycle", "event": "old", "i": i}) + "\n" for i in range(40)))
    store = MetricsStore(path, segment_bytes=1_500, kept_segments=5)
    records, cursor = store.read(0)
    assert [r["i"] for r in records] == list(range(40)) and cursor == path.stat().st_size
    store.append({"kind": "lifecycle", "event": "new"})
    records, _ = store.read(cursor)
    assert [r["event"] for r in records] == ["new"] and len(_segment_files(path)) == 2


def _append_many(path: str, writer: int, count: int) -> None:
    store = MetricsStore(path, segment_bytes=4_000, kept_segments=1_000)
    for i in range(count):
        store.append({"kind": "lifecycle", "event": "tick", "writer": writer, "i": i})


def test_writers_in_several_processes_lose_and_repeat_nothing_across_cuts(tmp_path):
    path = tmp_path / "m.jsonl"
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_append_many, args=(str(path), w, 300)) for w in range(3)]
    for process in writers:
        process.start()
    store, cursor, seen = MetricsStore(path, segment_bytes=4_000, kept_segments=1_000), 0, []
    while any(p.is_alive() for p in writers):
        records, cursor = store.read(cursor)
        seen += [(r["writer"], r["i"]) for r in records]
    for process in writers:
        process.join(timeout=30)
        assert process.exitcode == 0
    seen += [(r["writer"], r["i"]) for r in store.read(cursor)[0]]
    assert sorted(seen) == [(w, i) for w in range(3) for i in range(300)]
    for w in range(3):
        assert [i for writer, i in seen if writer == w] == list(range(300))  # each writer's records in order
    assert len(_segment_files(path)) > 10


def test_remove_deletes_every_segment(tmp_path):
    path = tmp_path / "m.jsonl"
    store = _ticked(path, 40, segment_bytes=500, kept_segments=3)
    store.remove()
    assert _segment_files(path) == [] and store.read(0) == ([], 0) and store.size() == 0
