"""Python CPU per task and per event, told apart by when the workers spent it."""

import numpy as np
import pandas as pd
import pytest

from dagster_reconf.core.scaling.profiling import profile_stream
from dagster_reconf.core.scaling.python_cpu_split import split_python_cpu
from dagster_reconf.core.scaling.scaling_plan import Knobs

SCAN = "j0.d1:Exchange+MapInArrow+MicroBatchScan#a"


def _run(
    set_up_ms: float,
    per_event_ms: float,
    batches: int = 12,
    events: int = 300,
    task_ms: float = 3000.0,
    gap_ms: float = 1000.0,
    seed: int = 0,
) -> tuple[pd.DataFrame, np.ndarray]:
    """One Python task per batch: its set-up CPU in the first 150 ms, its per-event CPU spread over it; the counter
    sampled every 100 ms (with jitter) in 10 ms ticks, as /proc reports it."""
    rng = np.random.default_rng(seed)
    tasks, t0 = [], 1_000_000.0
    for batch in range(batches):
        tasks.append(
            {
                "operator": SCAN,
                "batch_id": batch,
                "task_id": batch,
                "start_ms": t0,
                "end_ms": t0 + task_ms,
                "events": float(events),
            }
        )
        t0 += task_ms + gap_ms
    frame = pd.DataFrame(tasks)
    times = np.arange(frame["start_ms"].min() - 500, t0, 100.0) + rng.uniform(0, 20, size=None)
    cpu = np.zeros_like(times)
    for task in tasks:
        s, e = task["start_ms"], task["end_ms"]
        cpu += set_up_ms * np.clip((times - s) / 150.0, 0, 1)
        cpu += per_event_ms * events * np.clip((times - s) / (e - s), 0, 1)
    return frame, np.column_stack([times, np.floor(cpu / 10.0) * 10.0])


@pytest.mark.parametrize(("set_up_ms", "per_event_ms"), [(120.0, 0.05), (20.0, 1.0), (0.0, 0.5)])
def test_set_up_bursts_and_per_event_cpu_are_told_apart(set_up_ms, per_event_ms):
    tasks, samples = _run(set_up_ms, per_event_ms)
    costs = split_python_cpu(tasks, samples)[SCAN]
    assert costs.per_task_ms == pytest.approx(set_up_ms, abs=max(0.15 * set_up_ms, 12.0))
    assert costs.per_event_ms == pytest.approx(per_event_ms, abs=max(0.15 * per_event_ms, 0.04))


def test_samples_that_cannot_tell_give_no_split():
    tasks, samples = _run(120.0, 0.05, batches=2)
    assert split_python_cpu(tasks, samples) == {}  # too few bins
    tasks, samples = _run(120.0, 0.05)
    assert split_python_cpu(tasks, samples[::20]) == {}  # samples two seconds apart: no bin can be read
    bursts = samples.copy()  # CPU in bursts that follow no task: the fit leaves too much unexplained
    bursts[:, 1] = np.cumsum(np.where(np.random.default_rng(1).random(len(bursts)) < 0.1, 300.0, 0.0))
    assert split_python_cpu(tasks, bursts) == {}


def test_the_profile_charges_the_split_per_task_and_queues_set_ups_it_did_not_see():
    # One core: each batch one 3 s scan task with 120 ms of Python set-up and 300 events at 0.05 ms of CPU each.
    tasks, samples = _run(120.0, 0.05)
    acts = tasks.assign(
        activity="processing", records_in=300, records_out=300, cpu_ms=0.0, src_worker=None, status="success"
    ).drop(columns="events")
    edges = tasks["end_ms"].to_numpy() + 100.0
    progress = pd.DataFrame(
        {
            "batch_id": tasks["batch_id"],
            "events": 300,
            "batch_duration_ms": 3100.0,
            "python_cpu_s": np.interp(edges, samples[:, 0], samples[:, 1]) / 1000.0,
            "python_cpu_samples": [
                samples[(samples[:, 0] > lo) & (samples[:, 0] <= hi)].tolist()
                for lo, hi in zip(np.r_[0.0, edges[:-1]], edges)
            ],
        }
    )
    knobs = Knobs(cores=1, source_partitions=1, state_partitions=1, trigger_interval_s=4.0)
    profile = profile_stream(acts, progress, knobs, warmup_batches=1, cpus=2)
    scan = profile.operators.iloc[0]
    assert SCAN in profile.task_costs_fitted
    assert scan["task_cpu_ms"] == pytest.approx(120.0, rel=0.15)
    # the batch's Python CPU (from the counter) is kept, only divided: 120 ms per task + 300 x 0.05 ms
    assert scan["task_cpu_ms"] + 300 * scan["cpu_ms_per_event"] == pytest.approx(135.0, rel=0.1)
    # 12 tasks on 2 CPUs start together: their 12 x 120 ms of set-up queue for the CPUs before any event, then the
    # waits spread over the 12 (the plain roofline would let the set-ups overlap the waits).
    twelve = knobs.model_copy(update={"cores": 12, "source_partitions": 12})
    a, b, a2, _ = profile.stage_lines(twelve)
    set_ups = 12 * scan["task_cpu_ms"] / 2
    assert profile.batch_ms_for(300, twelve) == pytest.approx(profile.base_ms + set_ups + max(a[0], a2[0]) * 300)
    assert profile.batch_ms_for(300, twelve) <= profile.contended_batch_ms_for(300, twelve)
    # how much of the set-ups later tasks' waits hide is unknown: the band reaches down to the plain roofline
    low, high = profile.batch_ms_band(300, twelve)
    assert low == pytest.approx(profile.batch_ms_for(300, twelve, queued_set_ups=False))
    assert low < profile.batch_ms_for(300, twelve) < high
    # four tasks at once on 2 CPUs: set-ups queue and smear over the stage, so the samples do not split them
    four = pd.concat([acts.assign(task_id=acts["task_id"] * 4 + i) for i in range(4)], ignore_index=True)
    contended = knobs.model_copy(update={"cores": 4, "source_partitions": 4})
    assert profile_stream(four, progress, contended, warmup_batches=1, cpus=2).task_costs_fitted == frozenset()
    assert profile_stream(four, progress, contended, warmup_batches=1, cpus=4).task_costs_fitted == {SCAN}
    # a profile measured with that contention has it in its figures already: the plain roofline
    measured_shared = profile_stream(
        acts, progress, knobs.model_copy(update={"cores": 4, "source_partitions": 4}), warmup_batches=1, cpus=2
    )
    a, b, a2, b2 = measured_shared.stage_lines(twelve)
    assert b2[0] == pytest.approx(b[0] * 2 / 12)
