import json

import pytest

from dagster_reconf.core.metrics import MetricsStore, progress_frame, progress_row, status_figures

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
    text = {**PROGRESS, "sources": [{"description": "PythonMicroBatchStreamWithAdmissionControl@1",
                                     "startOffset": json.dumps({"index": 4}), "endOffset": json.dumps({"index": 10}),
                                     "latestOffset": "null"}]}
    row = progress_row(text)
    assert row["end_offset"] == 10 and row["events"] == 6 and row["backlog_events"] is None
    assert row["source_kinds"] == "python" and row["latest_offset"] is None


def test_an_unknown_source_counts_rows_and_says_why_its_backlog_is_unknown():
    socket = {**PROGRESS, "sources": [{"description": "TextSocketV2[host: localhost, port: 9999]", "startOffset": 3,
                                       "endOffset": 5, "numInputRows": 17}]}
    row = progress_row(socket)
    assert row["events"] == 17 and row["backlog_events"] is None and row["source_kinds"] == "unknown"
    assert "TextSocketV2" in row["backlog_unknown"] and "backlog is unknown" in row["backlog_unknown"]


def test_progress_frame_orders_by_batch_and_skips_lifecycle_records():
    frame = progress_frame([{"kind": "progress", "progress": {**PROGRESS, "batchId": 9}}, {"kind": "lifecycle"},
                            {"kind": "progress", "progress": PROGRESS}])
    assert frame["batch_id"].tolist() == [7, 9]


def test_last_progress_reads_from_the_end(tmp_path, monkeypatch):
    import dagster_reconf.core.metrics as metrics

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
    logged = {k: v for k, v in PROGRESS.items() if k not in ("numInputRows", "inputRowsPerSecond", "processedRowsPerSecond")}
    logged["sources"] = [{**PROGRESS["sources"][0], "numInputRows": 3000, "inputRowsPerSecond": 2999.5,
                          "processedRowsPerSecond": "NaN"}]
    row = progress_row(logged)
    assert row["num_input_rows"] == 3000 and row["input_rows_per_second"] == 2999.5
