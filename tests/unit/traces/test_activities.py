"""The normalizer on the messy parts of real logs, each handled deliberately and counted."""

import pytest

from dagster_reconf.core.traces.activities import TraceNormalizer
from dagster_reconf.core.traces.event_schema import ACTIVITY_COLUMNS

from .test_store import JOB, task


def job(job_id, stages, query="q1", batch=0, parents=None):
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job_id,
        "Stage IDs": stages,
        "Properties": {"sql.streaming.queryId": query, "streaming.sql.batchId": str(batch)} if query else {},
        "Stage Infos": [
            {"Stage ID": s, "Parent IDs": (parents or {}).get(s, []), "RDD Info": [{"Scope": f'{{"name": "Op{i}"}}'}]}
            for i, s in enumerate(stages)
        ],
    }


def normalize(events):
    normalizer = TraceNormalizer()
    normalizer.add(
        [{"Event": "SparkListenerExecutorAdded", "Executor ID": "0", "Executor Info": {"Total Cores": 2}}, *events]
    )
    return normalizer, normalizer.table()


def timeline(table):
    return table[table["src_worker"].isna()]


def test_task_sequence_follows_snailtrail_spark_adapter():
    _, table = normalize([JOB, task(0, 0, 1000)])
    steps = timeline(table).sort_values("start_ms")
    # launch 1000, finish 1020, run 15, deserialize 2, result serialization 1, shuffle write 2 ms:
    # scheduling delay = 20 - 15 - 2 - 1 = 2; processing = 15 - 2 (shuffle write) = 13
    assert steps["activity"].tolist() == ["scheduling", "deserialization", "processing", "serialization"]
    assert (steps["end_ms"] - steps["start_ms"]).tolist() == [2, 2, 13, 3]
    assert steps["start_ms"].min() == 1000 and steps["end_ms"].max() == 1020
    # contiguous on the worker timeline
    assert (steps["start_ms"].to_numpy()[1:] == steps["end_ms"].to_numpy()[:-1]).all()
    messages = table[table["src_worker"].notna()]
    assert set(zip(messages["src_worker"], messages["dst_worker"], messages["activity"])) == {
        ("driver", "0/0", "control"),
        ("0/0", "driver", "data"),
    }


def test_shuffle_messages_join_parent_and_child_stage_tasks():
    _, table = normalize([JOB, task(0, 0, 1000), task(1, 0, 1000), task(2, 1, 1030)])
    shuffles = table[(table["activity"] == "data") & (table["dst_worker"] != "driver") & table["src_worker"].notna()]
    assert len(shuffles) == 2 and set(shuffles["src_worker"]) == {"0/0", "0/1"}
    assert (shuffles["end_ms"] - shuffles["start_ms"] <= 3).all()  # in flight while the child waits to fetch


def test_operators_are_stable_across_batches_while_stage_ids_grow():
    events = [
        job(0, [0, 1], batch=0, parents={1: [0]}),
        task(0, 0, 1000),
        task(1, 1, 1030),
        job(1, [2, 3], batch=1, parents={3: [2]}),
        task(2, 2, 2000),
        task(3, 3, 2030),
    ]
    _, table = normalize(events)
    by_batch = table.groupby("batch_id")["operator"].apply(lambda s: sorted(set(s)))
    assert by_batch[0] == by_batch[1] and len(by_batch[0]) == 2


def test_several_queries_and_non_streaming_jobs_in_one_application():
    events = [
        job(0, [0], query="qa", batch=5),
        task(0, 0, 1000),
        job(1, [1], query="qb", batch=9),
        task(1, 1, 1000),
        job(2, [2], query=None),
        task(2, 2, 1100),
    ]
    _, table = normalize(events)
    assert set(zip(table["query_id"].fillna("-"), table["batch_id"])) == {("qa", 5), ("qb", 9), ("-", -1)}


@pytest.mark.parametrize(
    "reason,killed,speculative,status",
    [({"Reason": "ExceptionFailure"}, False, False, "failed"), ({"Reason": "TaskKilled"}, True, True, "killed")],
)
def test_failed_killed_and_speculative_attempts_are_kept_and_counted(reason, killed, speculative, status):
    bad = task(1, 0, 1000)
    bad["Task End Reason"] = reason
    bad["Task Info"].update(Attempt=0, Killed=killed, Speculative=speculative)
    retry = task(2, 0, 1025)
    retry["Task Info"]["Attempt"] = 1
    normalizer, table = normalize([JOB, bad, retry])
    attempts = timeline(table).drop_duplicates(["task_id"]).set_index("task_id")
    assert attempts.loc[1, "status"] == status and bool(attempts.loc[1, "speculative"]) == speculative
    assert attempts.loc[2, "status"] == "success"
    assert normalizer.skipped[f"{status} task attempt (kept, marked {status})"] == 1


def test_stage_retry_keeps_the_same_operator():
    first, again = task(0, 0, 1000), task(1, 0, 1100)
    again["Stage Attempt ID"] = 1
    _, table = normalize([JOB, first, again])
    runs = timeline(table).drop_duplicates("task_id")
    assert runs["stage_attempt"].tolist() == [0, 1] and runs["operator"].nunique() == 1


def test_gaps_of_older_or_broken_logs_are_counted_not_guessed():
    no_metrics = task(1, 0, 1000)
    del no_metrics["Task Metrics"]
    reversed_times = task(2, 0, 1000)
    reversed_times["Task Info"]["Finish Time"] = 900
    unknown_stage = task(3, 99, 1000)
    normalizer, table = normalize([JOB, no_metrics, reversed_times, unknown_stage, {"Event": "SomeFutureEvent"}])
    assert normalizer.skipped["task without metrics"] == 1
    assert normalizer.skipped["task with invalid launch/finish time"] == 1
    assert normalizer.skipped["task of a stage never submitted"] == 1
    assert normalizer.skipped["event not used: SomeFutureEvent"] == 1
    assert set(timeline(table)["task_id"]) == {1}
    assert timeline(table)["activity"].tolist() == [
        "scheduling"
    ]  # no metrics: all of it is unexplained scheduling delay


def test_slots_follow_cores_and_tolerate_late_finish_reports():
    overlapping = [task(0, 0, 1000), task(1, 0, 1000), task(2, 0, 1010)]  # 3 tasks in flight on 2 cores
    normalizer, table = normalize([JOB, *overlapping])
    assert set(timeline(table)["worker"]) == {"0/0", "0/1"}
    assert normalizer.skipped["task launched before its slot's previous task was reported finished"] == 1


def test_removed_executor_keeps_its_history():
    normalizer, table = normalize(
        [JOB, task(0, 0, 1000), {"Event": "SparkListenerExecutorRemoved", "Executor ID": "0"}]
    )
    assert set(timeline(table)["worker"]) == {"0/0"}
    assert normalizer.skipped["event not used: SparkListenerExecutorRemoved"] == 1


def test_table_has_the_documented_schema():
    _, table = normalize([JOB, task(0, 0, 1000)])
    assert list(table.columns) == ACTIVITY_COLUMNS


def test_jobs_read_as_a_table_name_their_stages_as_jobs_read_one_by_one():
    import pyarrow as pa

    from dagster_reconf.core.traces.event_schema import EVENT_SCHEMA

    diamond = job(0, [0, 1, 2, 3], parents={1: [0], 2: [0], 3: [1, 2]})  # two paths of different length to the final
    diamond["Stage Infos"][1]["RDD Info"] = [{"Scope": None}, {"Name": "no scope"}]
    events = [
        diamond,
        job(1, [3, 4], parents={4: [3]}),  # the second job of batch 0 reuses stage 3 (skipped): the first job names it
        job(2, [5, 6, 7], batch=1, parents={6: [5], 7: [6, 99]}),  # a parent outside the job leads nowhere
        job(3, [8, 9, 10], batch=1, parents={10: [9]}),  # stage 8 is not an ancestor of the final stage
        {**job(4, [11], query=None), "Properties": None},
        {**job(5, [], batch=2), "Stage Infos": None},
    ]
    one_by_one = TraceNormalizer()
    one_by_one.add(events)
    columnar = TraceNormalizer()
    columnar.add_table(pa.Table.from_pylist(events, schema=EVENT_SCHEMA))
    assert columnar.stages == one_by_one.stages and len(columnar.stages) == 12
    assert columnar.state() == one_by_one.state()
    assert one_by_one.stages[3].operator.startswith("j0.d0:") and one_by_one.stages[4].operator.startswith("j1.d0:")
    assert one_by_one.stages[0].operator.startswith("j0.d2:")  # the shorter path counts
