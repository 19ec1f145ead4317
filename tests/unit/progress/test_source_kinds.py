"""Events and backlog per source kind, from progress JSON shaped as Spark 4.3 writes it (and a file source's
directory and log, measured by the probe the driver runs)."""

import json
import time

import pytest

from dagster_reconf.core.progress.source_kinds import FileBacklogProbe, source_figures, source_kind
from dagster_reconf.core.store.metrics import progress_row

KAFKA = {
    "description": "KafkaV2[Subscribe[orders]]",
    "startOffset": {"orders": {"0": 100, "1": 200}},
    "endOffset": {"orders": {"0": 150, "1": 260}},
    "latestOffset": {"orders": {"0": 400, "1": 260}},
    "numInputRows": 110,
    "metrics": {"avgOffsetsBehindLatest": "125.0", "maxOffsetsBehindLatest": "250", "minOffsetsBehindLatest": "0"},
}


@pytest.mark.parametrize(
    ("description", "kind"),
    [
        ("FileStreamSource[file:/data/in]", "file"),
        ("KafkaV2[Subscribe[orders]]", "kafka"),
        ("RateStreamV2[rowsPerSecond=50, rampUpTimeSeconds=0, numPartitions=default", "rate"),
        (
            "RatePerMicroBatchStream[rowsPerBatch=50, numPartitions=2, startTimestamp=0, advanceMsPerBatch=1000]",
            "rate-micro-batch",
        ),
        (
            "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStreamWithAdmissionControl@6a30a3d9",
            "python",
        ),
        ("TextSocketV2[host: localhost, port: 9999]", "socket"),
        ("MemoryStream[value#12]", "memory"),
        ("org.apache.spark.sql.execution.streaming.MemoryStream@1f2e", "memory"),
        ("MyCustomStream[x]", "unknown"),
    ],
)
def test_source_kind_from_sparks_description(description, kind):
    assert source_kind(description) == kind


def test_kafka_backlog_is_the_consumer_lag_per_partition():
    figures = source_figures(KAFKA)
    assert figures.kind == "kafka" and figures.events == 110 and figures.end == 410
    assert figures.backlog == 250 and figures.detail["lag_by_partition"] == {"orders/0": 250, "orders/1": 0}
    assert figures.detail["partitions"] == 2 and figures.detail["maxOffsetsBehindLatest"] == 250.0


def test_kafka_without_latest_offsets_falls_back_on_its_offsets_behind_metrics():
    figures = source_figures({**KAFKA, "latestOffset": None})
    assert figures.backlog == 250.0  # 125 on average over 2 partitions


def test_kafka_offsets_as_json_text():
    text = {**KAFKA, **{k: json.dumps(KAFKA[k]) for k in ("startOffset", "endOffset", "latestOffset")}}
    assert source_figures(text).backlog == 250


def test_rate_source_counts_rows_per_second():
    figures = source_figures(
        {
            "description": "RateStreamV2[rowsPerSecond=50, rampUpTimeSeconds=0, numPartitions=default",
            "startOffset": "2",
            "endOffset": "3",
            "latestOffset": "5",
            "numInputRows": 50,
        }
    )
    assert (figures.kind, figures.events, figures.end, figures.backlog) == ("rate", 50, 150.0, 100.0)


def test_an_uncapped_rate_source_is_behind_by_what_arrived_while_its_batch_ran():
    """Each batch takes every second up to its planning (latest = end), so the backlog is the batch's duration of
    arrivals: within one interval's worth while it keeps up, growing with the batches once it falls behind."""
    source = {
        "description": "RateStreamV2[rowsPerSecond=100, rampUpTimeSeconds=0, numPartitions=default",
        "startOffset": 40,
        "endOffset": 46,
        "latestOffset": 46,
        "numInputRows": 600,
    }
    assert source_figures(source).backlog == 0.0
    assert source_figures(source, batch_ms=6_600).backlog == 660.0
    steady = progress_row({"batchId": 3, "durationMs": {"triggerExecution": 800}, "sources": [source]})
    assert steady["backlog_events"] == 80.0


def test_rate_per_micro_batch_never_lags():
    figures = source_figures(
        {
            "description": "RatePerMicroBatchStream[rowsPerBatch=50, numPartitions=2, startTimestamp=0]",
            "startOffset": {"offset": 150, "timestamp": 3000},
            "endOffset": {"offset": 200, "timestamp": 4000},
            "latestOffset": None,
            "numInputRows": 50,
        }
    )
    assert (figures.events, figures.end, figures.backlog) == (50, 200.0, 0.0)


def test_python_sources_with_counter_offsets_and_without():
    generated = source_figures(
        {
            "description": "PythonMicroBatchStreamWithAdmissionControl@1",
            "startOffset": '{"index": 10}',
            "endOffset": '{"index": 30}',
            "latestOffset": '{"index": 45}',
        }
    )
    assert (generated.kind, generated.events, generated.backlog) == ("python", 20, 15.0)
    opaque = source_figures(
        {
            "description": "PythonMicroBatchStreamWithAdmissionControl@2",
            "startOffset": '{"cursor": "a"}',
            "endOffset": '{"cursor": "b"}',
            "latestOffset": '{"cursor": "c"}',
            "numInputRows": 7,
        }
    )
    assert opaque.events == 7 and opaque.backlog is None and "not counters" in opaque.detail["reason"]


def test_file_source_backlog_comes_from_the_driver_and_is_unknown_without_it():
    source = {
        "description": "FileStreamSource[file:/in]",
        "startOffset": {"logOffset": 0},
        "endOffset": {"logOffset": 1},
        "latestOffset": None,
        "numInputRows": 40,
    }
    assert source_figures(source).backlog is None
    measured = source_figures(source, {"backlog_events": 120.0, "pending_files": 3, "pending_bytes": 600})
    assert (measured.events, measured.backlog, measured.detail["pending_files"]) == (40, 120.0, 3)


def _log(checkpoint, name, offset_files):
    log = checkpoint / "sources" / "0"
    log.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [json.dumps({"path": f"file://{p}", "timestamp": 0, "batchId": b}) for p, b in offset_files]
    (log / name).write_text("\n".join(lines))


def test_file_probe_counts_unread_files_and_their_rows(tmp_path):
    directory, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    directory.mkdir()
    for i in range(4):
        (directory / f"f{i}.json").write_text("x" * 100)
    (directory / "_SUCCESS").write_text("")  # Spark's hidden files are never input
    (directory / ".f9.json.tmp").write_text("x" * 1000)
    _log(checkpoint, "0", [(directory / "f0.json", 0)])
    probe = FileBacklogProbe(checkpoint)
    batch = {
        "description": f"FileStreamSource[file:{directory}]",
        "startOffset": None,
        "endOffset": {"logOffset": 0},
        "numInputRows": 20,
    }
    before = time.time()
    first = probe.measure(batch)
    assert before <= first["listed_at"] <= time.time()  # the backlog is what had landed by then
    assert (first["pending_files"], first["pending_bytes"], first["rows_per_byte"]) == (3, 300, 0.2)
    assert first["backlog_events"] == 60.0
    # The next batch took two files (a compacted log names every file with its log offset).
    _log(checkpoint, "1.compact", [(directory / "f0.json", 0), (directory / "f1.json", 1), (directory / "f2.json", 1)])
    second = probe.measure(
        {**batch, "startOffset": {"logOffset": 0}, "endOffset": {"logOffset": 1}, "numInputRows": 60}
    )
    assert (second["pending_files"], second["backlog_events"]) == (1, round(100 * 80 / 300, 1))


def test_file_probe_ignores_other_sources_and_a_missing_directory(tmp_path):
    probe = FileBacklogProbe(tmp_path / "checkpoint")
    assert probe.measure({"description": "KafkaV2[Subscribe[t]]"}) == {}
    empty = probe.measure({"description": f"FileStreamSource[file:{tmp_path / 'nothing'}]", "numInputRows": 0})
    assert empty["pending_files"] == 0 and empty["backlog_events"] == 0.0


def test_a_rate_source_declares_its_rate_and_observe_takes_it_exactly():
    from dagster_reconf.core.scaling.signal import observe
    from dagster_reconf.core.store.metrics import progress_frame

    def batch(n: int, seconds: int, ramp: int = 0) -> dict:
        source = {
            "description": f"RateStreamV2[rowsPerSecond=200, rampUpTimeSeconds={ramp}, numPartitions=default",
            "startOffset": str(seconds - 1),
            "endOffset": str(seconds),
            "latestOffset": str(seconds),
            "numInputRows": 200,
        }
        stamp = f"2026-11-29T00:00:{n * 0.5 + 0.4 * (n % 2):06.3f}Z"  # half-second triggers, jittered
        progress = {"batchId": n, "timestamp": stamp, "sources": [source], "durationMs": {"triggerExecution": 200}}
        return {"kind": "progress", "stream": "s", "progress": progress}

    # whole-second offsets over half-second batches: the offered position moves in steps of 200 events
    records = [batch(n, 10 + n // 2) for n in range(10)]
    frame = progress_frame(records)
    assert frame["declared_rate"].tolist() == [200.0] * 10
    signal = observe(frame, 0.5, 60.0, warmup_batches=1)
    assert signal.source_rate == 200.0 and signal.peak_rate == 200.0
    ramping = progress_frame([batch(n, 10 + n // 2, ramp=30) for n in range(10)])
    assert ramping["declared_rate"].isna().all()  # below rowsPerSecond until 30 s: estimated from offsets instead
    assert observe(ramping, 0.5, 60.0, warmup_batches=1).source_rate != 200.0


def test_a_file_source_s_offered_rate_is_read_when_its_directory_was_listed():
    from dagster_reconf.core.scaling.signal import observe
    from dagster_reconf.core.store.metrics import progress_frame

    # Files of 10 events land every 0.4 s: 25 events/s. A 3 s trigger after a scale-up: the first batches still catch
    # up (2.8 s), the newest take 1.2 s. The probe lists the directory after each batch, so its backlog holds what had
    # landed by the batch's end.
    durations = [2.8] * 5 + [1.2] * 3
    records, consumed = [], 0

    def landed(at: float) -> int:
        return 10 * (int(at / 0.4) + 1)

    for n, seconds in enumerate(durations):
        start = 3.0 * n
        events, consumed = landed(start) - consumed, landed(start)  # the batch took what had landed when planned
        progress = {
            "batchId": n,
            "timestamp": f"2026-11-29T00:00:{start:06.3f}Z",
            "sources": [{"description": "FileStreamSource[file:/in]", "numInputRows": events}],
            "durationMs": {"triggerExecution": int(seconds * 1000)},
        }
        listed = {
            "backlog_events": float(landed(start + seconds) - consumed),
            "listed_at": 1_795_910_400 + start + seconds,
        }
        records.append({"kind": "progress", "stream": "s", "progress": progress, "sources": [listed]})
    frame = progress_frame(records)
    assert frame["offered_after_s"].tolist() == pytest.approx(durations)
    assert observe(frame, 3.0, 60.0, warmup_batches=0).source_rate == pytest.approx(25.0, rel=0.05)
    # Placed at the batches' starts, the same positions read 20 events/s: the listing after a long catch-up batch
    # counts arrivals up to its end, so the span that starts there looks 1.6 s longer than it is.
    assert observe(frame.assign(offered_after_s=0.0), 3.0, 60.0, warmup_batches=0).source_rate == pytest.approx(20.0)
    # Records from before the probe kept its time: the listing is placed at the batch's end.
    undated = [{**r, "sources": [{"backlog_events": r["sources"][0]["backlog_events"]}]} for r in records]
    assert progress_frame(undated)["offered_after_s"].tolist() == pytest.approx(durations)
