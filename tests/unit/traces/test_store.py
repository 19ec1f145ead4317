import json

import pandas as pd

from dagster_reconf.core.traces.activities import TraceNormalizer
from dagster_reconf.core.traces.eventlog import ReadResult, TableReadResult
from dagster_reconf.core.traces.store import TraceStore, application_logs, normalize_log

JOB = {
    "Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1],
    "Properties": {"sql.streaming.queryId": "q1", "streaming.sql.batchId": "0"},
    "Stage Infos": [
        {"Stage ID": 0, "Parent IDs": [], "RDD Info": [{"Scope": '{"name": "MicroBatchScan"}'}]},
        {"Stage ID": 1, "Parent IDs": [0], "RDD Info": [{"Scope": '{"name": "StateStoreSave"}'}]},
    ],
}


def task(task_id, stage, launch, executor="0"):
    return {
        "Event": "SparkListenerTaskEnd", "Stage ID": stage, "Stage Attempt ID": 0, "Task End Reason": {"Reason": "Success"},
        "Task Info": {"Task ID": task_id, "Attempt": 0, "Launch Time": launch, "Finish Time": launch + 20,
                      "Executor ID": executor, "Getting Result Time": 0},
        "Task Metrics": {"Executor Deserialize Time": 2, "Executor Run Time": 15, "Result Serialization Time": 1,
                         "Shuffle Read Metrics": {"Fetch Wait Time": 3 if stage else 0},
                         "Shuffle Write Metrics": {"Shuffle Write Time": 2_000_000}},
    }


def events():
    return [
        {"Event": "SparkListenerLogStart", "Spark Version": "4.3.0"},
        {"Event": "SparkListenerApplicationStart", "App ID": "app-1"},
        {"Event": "SparkListenerExecutorAdded", "Executor ID": "0", "Executor Info": {"Total Cores": 2}},
        JOB, task(0, 0, 1000), task(1, 0, 1000), task(2, 1, 1030), task(3, 1, 1030),
    ]


def write(path, evs):
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))


def test_normalizer_state_round_trip_continues_identically():
    whole = TraceNormalizer()
    whole.add(events())
    split = TraceNormalizer()
    split.add(events()[:5])
    first = split.take_rows()
    resumed = TraceNormalizer.from_state(json.loads(json.dumps(split.state())))
    resumed.add(events()[5:])
    combined = pd.concat([first, resumed.table()], ignore_index=True)
    keys = ["task_id", "activity", "worker", "dst_worker", "start_ms", "end_ms", "src_worker"]
    ordered = lambda f: f.sort_values(keys, na_position="first", ignore_index=True)  # noqa: E731
    pd.testing.assert_frame_equal(ordered(combined), ordered(whole.table()))


def test_ingest_is_incremental_and_windows_read_back(tmp_path):
    logs = tmp_path / "eventlog"
    logs.mkdir()
    write(logs / "app-1.inprogress", events()[:6])
    store = TraceStore(tmp_path / "traces")
    first = store.ingest(logs)
    assert first.events == 5 and first.activities > 0  # the sixth, LogStart, is counted as skipped
    write(logs / "app-1", events())  # Spark renamed the finished log
    (logs / "app-1.inprogress").unlink()
    second = store.ingest(logs)
    assert second.events == 2
    assert store.ingest(logs).events == 0
    lo, hi = store.time_range()
    everything = store.activities(lo, hi + 1)  # [lo, hi) would leave out zero-length messages at hi
    expected = TraceNormalizer()
    expected.add(events())
    assert len(everything) == len(expected.table())
    window = store.activities(1030, 1040)
    assert set(window["stage_id"]) == {1} or (window["end_ms"] >= 1030).all()
    assert first.skipped["event not used: SparkListenerLogStart"] == 1


def test_application_logs_lists_each_app(tmp_path):
    (tmp_path / "eventlog_v2_app-2").mkdir()
    (tmp_path / "local-17.zstd.inprogress").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert {p.name for p in application_logs(tmp_path)} == {"eventlog_v2_app-2", "local-17.zstd.inprogress"}


def test_a_line_arrow_refuses_falls_back_to_line_by_line_with_the_same_rows(tmp_path):
    without_first_task, corrupt = tmp_path / "app-clean", tmp_path / "app-corrupt"
    write(without_first_task, [e for e in events() if e.get("Task Info", {}).get("Task ID") != 0])
    write(corrupt, events())
    corrupt.write_text(corrupt.read_text().replace('{"Event": "SparkListenerTaskEnd"', '{"Event": "SparkListenerTaskEnd" oops', 1)
                       + '{"Event": "SparkListenerJobEnd", "Job ID": "not a number"}\n')
    fast_rows, _, fast = normalize_log(without_first_task)
    slow_rows, _, slow = normalize_log(corrupt)
    assert isinstance(fast, TableReadResult) and isinstance(slow, ReadResult)
    assert slow.skipped == {"corrupt_line": 1, "event not used: SparkListenerLogStart": 1, "event not used: SparkListenerJobEnd": 1}
    assert fast.skipped == {"event not used: SparkListenerLogStart": 1}
    pd.testing.assert_frame_equal(slow_rows, fast_rows)


def _ingest_repeatedly(root: str, logs: str, times: int) -> int:
    store = TraceStore(root)
    return sum(store.ingest(logs).activities for _ in range(times))


def test_concurrent_ingests_from_several_processes_neither_duplicate_nor_lose_activities(tmp_path):
    """A sensor tick, a snapshot run and a plan run ingest the same store at once while the log grows."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    logs = tmp_path / "eventlog"
    logs.mkdir()
    log = logs / "app-1.inprogress"
    head = events()[:4]
    write(log, head)
    root = tmp_path / "traces"
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        readers = [pool.submit(_ingest_repeatedly, str(root), str(logs), 40) for _ in range(3)]
        for k in range(200):  # the driver keeps appending tasks meanwhile
            with open(log, "a") as fh:
                fh.write(json.dumps(task(10 + k, 0, 2000 + k)) + "\n")
        appended = sum(r.result() for r in readers)
    appended += TraceStore(root).ingest(logs).activities
    reference = tmp_path / "reference"
    expected = TraceStore(reference).ingest(logs).activities
    stored = TraceStore(root).activities(0, 1e12)
    assert appended == expected == len(stored)
    assert not stored.duplicated(["task_id", "activity", "worker", "src_worker", "dst_worker"]).any()


def test_a_log_completed_while_being_read_is_read_under_its_final_name(tmp_path, monkeypatch):
    """Spark renames ``x.inprogress`` to ``x`` when an application stops, at any moment: a
    reconfiguration restarts the driver while a snapshot run ingests."""
    import dagster_reconf.core.traces.store as store_module

    logs = tmp_path / "eventlog"
    logs.mkdir()
    write(logs / "app-1.inprogress", events())
    real_normalize = store_module.normalize_log
    renamed = []

    def rename_first(log, *args):
        if not renamed:
            log.rename(log.with_name("app-1"))
            renamed.append(log)
        return real_normalize(log, *args)

    monkeypatch.setattr(store_module, "normalize_log", rename_first)
    report = TraceStore(tmp_path / "traces").ingest(logs)
    expected = TraceNormalizer()
    expected.add(events())
    assert renamed and report.activities == len(expected.table())
    assert json.loads((tmp_path / "traces" / "state.json").read_text())["logs"].keys() == {"app-1"}
