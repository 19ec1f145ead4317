import json

import pandas as pd

from dagster_reconf.core.traces.activities import TraceNormalizer
from dagster_reconf.core.traces.event_table import TableReadResult
from dagster_reconf.core.traces.eventlog import ReadResult
from dagster_reconf.core.traces.store import TraceStore, application_logs, normalize_log

JOB = {
    "Event": "SparkListenerJobStart",
    "Job ID": 0,
    "Stage IDs": [0, 1],
    "Properties": {"sql.streaming.queryId": "q1", "streaming.sql.batchId": "0"},
    "Stage Infos": [
        {"Stage ID": 0, "Parent IDs": [], "RDD Info": [{"Scope": '{"name": "MicroBatchScan"}'}]},
        {"Stage ID": 1, "Parent IDs": [0], "RDD Info": [{"Scope": '{"name": "StateStoreSave"}'}]},
    ],
}


def task(task_id, stage, launch, executor="0"):
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Stage Attempt ID": 0,
        "Task End Reason": {"Reason": "Success"},
        "Task Info": {
            "Task ID": task_id,
            "Attempt": 0,
            "Launch Time": launch,
            "Finish Time": launch + 20,
            "Executor ID": executor,
            "Getting Result Time": 0,
        },
        "Task Metrics": {
            "Executor Deserialize Time": 2,
            "Executor Run Time": 15,
            "Result Serialization Time": 1,
            "Shuffle Read Metrics": {"Fetch Wait Time": 3 if stage else 0},
            "Shuffle Write Metrics": {"Shuffle Write Time": 2_000_000},
        },
    }


def events():
    return [
        {"Event": "SparkListenerLogStart", "Spark Version": "4.3.0"},
        {"Event": "SparkListenerApplicationStart", "App ID": "app-1"},
        {"Event": "SparkListenerExecutorAdded", "Executor ID": "0", "Executor Info": {"Total Cores": 2}},
        JOB,
        task(0, 0, 1000),
        task(1, 0, 1000),
        task(2, 1, 1030),
        task(3, 1, 1030),
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
    corrupt.write_text(
        corrupt.read_text().replace('{"Event": "SparkListenerTaskEnd"', '{"Event": "SparkListenerTaskEnd" oops', 1)
        + '{"Event": "SparkListenerJobEnd", "Job ID": "not a number"}\n'
    )
    fast_rows, _, fast = normalize_log(without_first_task)
    slow_rows, _, slow = normalize_log(corrupt)
    assert isinstance(fast, TableReadResult) and isinstance(slow, ReadResult)
    assert slow.skipped == {
        "corrupt_line": 1,
        "event not used: SparkListenerLogStart": 1,
        "event not used: SparkListenerJobEnd": 1,
    }
    assert fast.skipped == {"event not used: SparkListenerLogStart": 1}
    pd.testing.assert_frame_equal(slow_rows, fast_rows)


def many_tasks():
    """Ten jobs of two stages, four tasks each: enough lines for several parts of three events."""
    out = events()[:3]
    for job in range(10):
        stages = [2 * job, 2 * job + 1]
        out.append(
            {
                **JOB,
                "Job ID": job,
                "Stage IDs": stages,
                "Properties": {**JOB["Properties"], "streaming.sql.batchId": str(job)},
                "Stage Infos": [
                    {**info, "Stage ID": s, "Parent IDs": [s - 1] if k else []}
                    for k, (info, s) in enumerate(zip(JOB["Stage Infos"], stages, strict=True))
                ],
            }
        )
        t0 = 1000 + 100 * job
        out += [
            task(4 * job, stages[0], t0),
            task(4 * job + 1, stages[0], t0),
            task(4 * job + 2, stages[1], t0 + 30),
            task(4 * job + 3, stages[1], t0 + 30),
        ]
    return out


def sorted_rows(frame):
    return frame.sort_values(["start_ms", "end_ms", "activity", "worker", "src_worker", "task_id"]).reset_index(
        drop=True
    )


def test_parts_normalized_while_duckdb_reads_the_next_make_the_rows_of_a_whole_read(tmp_path, monkeypatch):
    from dagster_reconf.core.traces import event_table

    log = tmp_path / "app-1"  # finished: DuckDB reads it
    write(log, many_tasks())
    whole, _, _ = normalize_log(log)
    parts = []
    monkeypatch.setattr(event_table, "DUCKDB_PART_ROWS", 3)
    monkeypatch.setattr(
        TraceNormalizer,
        "add_table",
        lambda self, table, add=TraceNormalizer.add_table: (parts.append(table.num_rows), add(self, table)),
    )
    streamed, _, read = normalize_log(log)
    assert len(parts) > 5 and sum(parts) == read.events_read == 2 + 10 * 5
    pd.testing.assert_frame_equal(sorted_rows(streamed), sorted_rows(whole))


def test_a_part_refused_after_others_were_normalized_starts_over_line_by_line(tmp_path, monkeypatch):
    import pyarrow as pa

    from dagster_reconf.core.traces import event_table

    log = tmp_path / "app-1"
    write(log, many_tasks())
    start = TraceNormalizer.from_state(normalize_log(log)[1].state())  # a normalizer that has read before
    before = start.state()
    # DuckDB refuses a corrupt line in a small file before handing on anything; in a big one it can fail in a
    # later part: here the third part is refused.
    monkeypatch.setattr(event_table, "DUCKDB_PART_ROWS", 3)
    parts, part_table = [], event_table.part_table

    def third_part_refused(batch, schema):
        parts.append(len(parts))
        if len(parts) == 3:
            raise pa.ArrowInvalid("refused in the third part")
        return part_table(batch, schema)

    monkeypatch.setattr(event_table, "part_table", third_part_refused)
    rows, normalizer, read = normalize_log(log, None, start)
    assert len(parts) == 3 and isinstance(read, ReadResult)
    assert normalizer is start  # the two parts went to a copy, dropped: the line-by-line read went on from ``start``
    monkeypatch.undo()
    expected, _, _ = normalize_log(log, None, TraceNormalizer.from_state(before))
    pd.testing.assert_frame_equal(sorted_rows(rows), sorted_rows(expected))


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


def test_activities_of_one_streams_queries_only(tmp_path):
    """A driver runs the stream's query and the control plane's helpers (replays, probes) under other query ids."""
    helper = {
        **JOB,
        "Job ID": 1,
        "Stage IDs": [2, 3],
        "Properties": {"sql.streaming.queryId": "replay", "streaming.sql.batchId": "0"},
        "Stage Infos": [
            {**JOB["Stage Infos"][0], "Stage ID": 2},
            {**JOB["Stage Infos"][1], "Stage ID": 3, "Parent IDs": [2]},
        ],
    }
    logs = tmp_path / "eventlog"
    logs.mkdir()
    write(logs / "app-1", [*events(), helper, task(4, 2, 1100), task(5, 3, 1130)])
    store = TraceStore(tmp_path / "traces")
    store.ingest(logs)
    everything = store.activities(0, 10_000)
    assert set(everything["query_id"].dropna()) == {"q1", "replay"}
    mine = store.activities(0, 10_000, query_ids=["q1"])
    assert set(mine["query_id"]) == {"q1"} and set(mine["task_id"]) == {0, 1, 2, 3}
    assert store.activities(0, 10_000, query_ids=[]).empty
