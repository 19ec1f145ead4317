"""CP on synthetic activity graphs whose path counts and CP are known in closed form."""

import math

import numpy as np
import pandas as pd
import pytest

from dagster_reconf.core.traces.critical_path import CPInvariantError, build_graph, critical_participation, snapshot
from dagster_reconf.core.traces.event_schema import ACTIVITY_COLUMNS
from dagster_reconf.core.traces.summaries import summarize, what_if_parallelism


def row(worker, activity, start, end, *, task, operator="op", src=None, dst=None):
    values = dict.fromkeys(ACTIVITY_COLUMNS, 0)
    values.update(
        app_id="app",
        query_id="q",
        batch_id=0,
        job_id=0,
        stage_id=0,
        stage_attempt=0,
        operator=operator,
        task_id=task,
        attempt=0,
        status="success",
        speculative=False,
        worker=worker,
        src_worker=src,
        dst_worker=dst,
        activity=activity,
        start_ms=float(start),
        end_ms=float(end),
    )
    return values


def all_to_all(k, rounds, d=10.0, m=2.0, durations=None, operators=None):
    """k workers; r+1 processing rounds separated by r all-to-all exchanges of latency m.

    ``durations[(round, worker)]`` overrides a processing time; a round ends (and its
    messages leave) when its slowest worker finishes, like a Spark stage barrier.
    """
    rows, t, task = [], 0.0, 0
    for r in range(rounds + 1):
        lengths = [(durations or {}).get((r, w), d) for w in range(k)]
        op = (operators or {}).get(r, "op")
        for w in range(k):
            rows.append(row(f"e/{w}", "processing", t, t + lengths[w], task=task, operator=op))
            task += 1
        barrier = t + max(lengths)
        if r < rounds:
            for a in range(k):
                for b in range(k):
                    rows.append(
                        row(f"e/{a}", "data", barrier, barrier + m, task=-1, operator=op, src=f"e/{a}", dst=f"e/{b}")
                    )
        t = barrier + (m if r < rounds else 0)
    return pd.DataFrame(rows), t


@pytest.mark.parametrize("k,rounds", [(1, 0), (2, 1), (3, 4), (4, 10), (8, 400)])
def test_path_counts_and_cp_match_closed_form(k, rounds):
    d, m = 10.0, 2.0
    table, end = all_to_all(k, rounds, d, m)
    with_cp, result = snapshot(table, 0.0, end)
    assert result.log_paths == pytest.approx((rounds + 1) * math.log(k), abs=1e-9)
    assert abs(result.cp_sum - 1) <= 1e-9
    processing = with_cp[with_cp["activity"] == "processing"]["cp"]
    np.testing.assert_allclose(processing, d / (k * end), rtol=1e-9)
    messages = with_cp[with_cp["activity"] == "data"]["cp"]
    np.testing.assert_allclose(messages, m / (k * k * end), rtol=1e-9)


def test_straggler_tops_the_worker_summary():
    table, end = all_to_all(4, 6, durations={(2, 3): 40.0, (4, 3): 40.0})
    _, result = snapshot(table, 0.0, end)
    by_worker = summarize(table, result)["by_worker"]
    assert by_worker["worker"].iloc[0] == "e/3"
    assert by_worker["cp"].iloc[0] > 2 * by_worker["cp"].iloc[1]
    assert by_worker["cp"].sum() == pytest.approx(1.0, abs=1e-9)


def test_slow_operator_tops_the_operator_summary():
    ops = {r: ("slow_join" if r % 2 else "scan") for r in range(7)}
    durations = {(r, w): 30.0 for r in range(7) if r % 2 for w in range(3)}
    table, end = all_to_all(3, 6, durations=durations, operators=ops)
    _, result = snapshot(table, 0.0, end)
    by_operator = summarize(table, result)["by_operator"]
    assert by_operator["operator"].iloc[0] == "slow_join"
    assert by_operator["cp"].sum() == pytest.approx(1.0, abs=1e-9)


def test_window_clips_activities_and_still_sums_to_one():
    table, end = all_to_all(3, 5)
    for lo, hi in [(5.0, end - 5.0), (11.0, 13.0), (0.0, 1.0)]:
        _, result = snapshot(table, lo, hi)
        assert abs(result.cp_sum - 1) <= 1e-9


def test_no_path_across_window_is_an_error():
    table = pd.DataFrame([row("e/0", "processing", 0, 10, task=0), row("e/0", "processing", 20, 30, task=1)])
    graph = build_graph(table, 0.0, 30.0)
    # In [10, 20) the executor waits; the driver works then, but waits (for the tasks) before
    # and after, so no path joins the window's start to its end.
    with pytest.raises(CPInvariantError, match=r"no path crosses the window"):
        critical_participation(graph)


def test_what_if_more_workers_shortens_critical_path():
    ops = {r: ("slow" if r == 1 else "fast") for r in range(3)}
    table, end = all_to_all(2, 2, d=10.0, m=1.0, durations={(1, 0): 50.0, (1, 1): 50.0}, operators=ops)
    _, result = snapshot(table, 0.0, end)
    prediction = what_if_parallelism(table, result, "slow", 4)
    assert prediction["operator_workers"] == 2
    assert prediction["current_ms"] == pytest.approx(end)
    assert prediction["predicted_ms"] == pytest.approx(end - 25.0)
    with pytest.raises(
        ValueError, match=r"operator 'nope' has no activity in this snapshot; operators: \['fast', 'slow'\]"
    ):
        what_if_parallelism(table, result, "nope", 2)


def test_a_task_launched_before_its_slots_previous_one_was_reported_finished():
    """As measured in a Spark 4.3 local-mode log: task 2 launches on slot e/1 at 687 while task 1's serialization is
    stamped until 693; the slot runs one task at a time, so task 1 ends where task 2 starts, and CP still sums to 1
    (before, the overlap left 693-703.8 as waiting on every worker: no path crossed the window)."""
    table = pd.DataFrame(
        [
            row("driver", "control", 600, 602, task=1, src="driver", dst="e/1"),
            row("e/1", "scheduling", 600, 602, task=1),
            row("e/1", "processing", 602, 691.8, task=1),
            row("e/1", "serialization", 691.8, 693, task=1),
            row("e/1", "data", 693, 693, task=1, src="e/1", dst="driver"),
            row("driver", "control", 687, 689, task=2, src="driver", dst="e/1"),
            row("e/1", "scheduling", 687, 689, task=2),
            row("e/1", "deserialization", 689, 690, task=2),
            row("e/1", "processing", 690, 703.8, task=2),
            row("e/1", "serialization", 703.8, 705, task=2),
            row("e/1", "data", 705, 705, task=2, src="e/1", dst="driver"),
        ]
    )
    with_cp, result = snapshot(table, 600.0, 705.0)
    assert abs(result.cp_sum - 1) <= 1e-9
    cp = with_cp.set_index(["task_id", "activity"])["cp"]
    assert cp[(1, "serialization")].item() == 0  # stamped after task 2 started on the slot: not on the timeline
    assert cp[(2, "processing")].item() == pytest.approx(13.8 / 105)  # the slot's only activity then: on every path


def test_a_window_across_a_new_spark_context_keeps_its_tasks_apart():
    """A handover or restart starts a new SparkContext, whose task ids start again at 0: the driver must not take
    the old application's task 0 and the new one's for one task in flight through the pause (every worker waiting,
    no path across the window), nor the slot sequencing take them for one task."""

    def launched(table):  # the driver launches each task and takes its result (control messages)
        tasks = table[table["activity"] == "processing"]
        messages = [
            row("driver", "control", t.start_ms, t.start_ms + 0.5, task=t.task_id, src="driver", dst=t.worker)
            for t in tasks.itertuples()
        ]
        messages += [
            row(t.worker, "control", t.end_ms, t.end_ms + 0.5, task=t.task_id, src=t.worker, dst="driver")
            for t in tasks.itertuples()
        ]
        return pd.concat([table, pd.DataFrame(messages)], ignore_index=True)

    old, _ = all_to_all(2, 1)
    new, end = all_to_all(2, 1)
    old = launched(old.assign(start_ms=old["start_ms"] + 1.0, end_ms=old["end_ms"] + 1.0))
    new = launched(new.assign(app_id="app-2", start_ms=new["start_ms"] + 100.0, end_ms=new["end_ms"] + 100.0))
    with_cp, result = snapshot(pd.concat([old, new], ignore_index=True), 0.0, 100.0 + end)
    assert abs(result.cp_sum - 1) <= 1e-9
    assert with_cp.groupby("app_id")["cp"].sum().gt(0).all()
