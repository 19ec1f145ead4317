"""Where a stage's measured time goes: per event or per task, CPU or waiting, queueing for a CPU or not.

Each helper moves a part of a stage's measured cost from one column of the operator table to another (``ops``, one
row per logical operator, changed in place as the profile is measured), by what the measurements can tell: the
tasks' records and times, the batches' sizes, the Python workers' CPU samples, Spark's state commit times, and two
configurations whose tasks per event differ (:func:`fit_task_costs`). ``docs/profile.md`` says why each split holds.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dagster_reconf.core.scaling.profile import (
    PYTHON_PLAN_NODES,
    SCAN_PLAN_NODES,
    STATE_PLAN_NODES,
    StreamProfile,
    runs_python,
)
from dagster_reconf.core.scaling.python_cpu_split import split_python_cpu

__all__ = [
    "charge_round_trips",
    "fit_task_costs",
    "python_round_trips",
    "queueing",
    "reads_python_source",
    "split_by_batch_size",
    "split_by_task_records",
    "split_python_cpu_per_task",
    "split_waiting_by_batch_size",
    "state_commit_per_task",
]


_EVEN_RECORDS = 1.1  # a batch's tasks read as doing the same work where their records differ no more than this


def queueing(
    per_task: pd.DataFrame,
    work: pd.Series,
    wait: pd.Series,
    cpu_side: pd.Series,
    overhead: pd.Series,
    shared: pd.Series,
) -> tuple[pd.Series, pd.Series]:
    """What each stage that ran more tasks at once than CPUs (``shared``) spent queueing for a CPU, as far as its tasks
    tell: per event of its tasks' mean time (at most its waiting ``wait``, at most its CPU over the CPUs ``cpu_side``,
    in the tasks' time: Brent's bound), and in its slowest task's excess (ms per batch, at most the stage's
    ``overhead``); 0 elsewhere.

    Where a batch's tasks hold as many records each (a source's partitions split evenly; a shuffle's by key may not,
    and a cost per task would tell them apart), they do the same work, so what sets them apart is how long each
    queued. The fastest per record queued least: per batch, its time per record over the stage's mean (``r``), over
    the window its median, and ``(1 - r) * work`` of the mean was queueing.
    Likewise the slowest task's time beyond its records at the mean rate (its share of the stage's
    overhead: 74-152 ms of 107-162 at 12 tasks, 24-82 at 6). Tasks that all compute (no waiting) share the CPUs
    alike, end together, and give neither: the CPU side of the roofline bounds them."""
    counted = per_task[per_task["records_in"] > 0]
    levels = ["operator", "batch_id"]
    stage = counted.groupby(level=levels)[["work", "records_in"]].sum()
    mean_rate = stage["work"] / stage["records_in"]  # per batch: the stage's time per record
    per_record = (counted["work"] / counted["records_in"]).groupby(level=levels)
    records = counted["records_in"].groupby(level=levels)
    even = (per_record.size() >= 2) & (records.max() <= _EVEN_RECORDS * records.min())
    fastest = (per_record.min() / mean_rate)[even]
    beyond = counted["work"] - counted["records_in"] * mean_rate.reindex(counted.index.droplevel("task_id")).to_numpy()
    excess = beyond.groupby(level=levels).max()[even]
    ratio = fastest.groupby(level="operator").median().reindex(work.index).fillna(1.0).clip(upper=1.0)
    slowest = excess.groupby(level="operator").median().reindex(work.index).fillna(0.0).clip(lower=0.0)
    mask = shared.to_numpy(dtype=bool)
    queue = np.minimum(np.minimum((1.0 - ratio) * work, wait), cpu_side)
    return queue.where(mask, 0.0), np.minimum(slowest, overhead).where(mask, 0.0)


def state_commit_per_task(ops: pd.DataFrame, rows: pd.DataFrame, total_events: float) -> pd.Series:
    """Each stateful stage's state store commit per task (Spark's ``commitTimeMs``), moved out of its waiting per
    event; changes ``ops`` in place. A commit writes the partition's changes whatever their number, so charged per
    event it would grow with a larger batch. Spread over the stateful stages by their waiting, at most all of it."""
    per_task = pd.Series(0.0, index=ops.index)
    stateful = (ops["kind"] == "shuffle") & ops.index.to_series().str.contains(STATE_PLAN_NODES).to_numpy()
    if "state_commit_ms" not in rows or not stateful.any():
        return per_task
    commit = pd.to_numeric(rows["state_commit_ms"], errors="coerce").fillna(0.0).sum()
    waits = ops.loc[stateful, "wait_ms_per_event"] * total_events
    if commit <= 0 or waits.sum() <= 0:
        return per_task
    moved = np.minimum(waits, commit * waits / waits.sum())  # per operator, over the window's batches
    ops.loc[stateful, "wait_ms_per_event"] -= moved / total_events
    per_task[stateful] = moved / (len(rows) * ops.loc[stateful, "tasks"].clip(lower=1))
    return per_task


def split_python_cpu_per_task(
    ops: pd.DataFrame, timeline: pd.DataFrame, rows: pd.DataFrame, batches: pd.DataFrame, uncontended: pd.Series
) -> list[str]:
    """Move each Python operator's CPU per task out of its CPU per event where the workers' sampled CPU tells them
    apart (see :mod:`dagster_reconf.core.scaling.python_cpu_split`); returns the operators split. ``ops`` is indexed by
    operator, changed in place.

    Only operators that ran no more tasks at once than CPUs (``uncontended``): with more, the set-ups queue for
    the CPUs and smear over the stage, so their bursts no longer mark them."""
    if "python_cpu_samples" not in rows:
        return []
    series = [s for s in rows["python_cpu_samples"] if isinstance(s, list) and s]
    python = ops.index[runs_python(ops.index.to_series()) & uncontended.to_numpy(dtype=bool)]
    if not series or python.empty:
        return []
    samples = np.asarray(sorted(pair for s in series for pair in s), dtype=np.float64)
    spans = (
        timeline[timeline["operator"].isin(python)]
        .groupby(["operator", "batch_id", "task_id"])
        .agg(start_ms=("start_ms", "min"), end_ms=("end_ms", "max"), records=("records_in", "sum"))
        .reset_index()
    )
    stage = spans.groupby(["operator", "batch_id"])["records"].transform("sum")
    count = spans.groupby(["operator", "batch_id"])["records"].transform("size")
    events = batches.loc[spans["batch_id"], "events"].to_numpy(dtype=float)
    share = np.where(stage > 0, spans["records"] / stage.where(stage > 0, 1), 1.0 / count)
    costs = split_python_cpu(spans.assign(events=events * share), samples)
    batch_events = max(float(batches["events"].median()), 1e-9)
    for op, cost in costs.items():
        _charge_per_task(ops, op, cost.per_task_ms, float(ops.at[op, "tasks"]), batch_events)
    return list(costs)


def _charge_per_task(ops: pd.DataFrame, op: str, per_task_ms: float, tasks: float, batch_events: float) -> None:
    """Move ``per_task_ms`` of CPU for each of ``op``'s ``tasks`` out of its CPU per event (batches of
    ``batch_events``),
    at most all of its CPU per batch; ``ops`` is indexed by operator, changed in place."""
    n = max(tasks, 1.0)
    per_task = min(per_task_ms, float(ops.at[op, "cpu_ms_per_event"]) * batch_events / n)
    ops.at[op, "task_cpu_ms"] = per_task
    ops.at[op, "cpu_ms_per_event"] = max(0.0, float(ops.at[op, "cpu_ms_per_event"]) - per_task * n / batch_events)


def charge_round_trips(
    ops: pd.DataFrame, trips: np.ndarray, rows: pd.DataFrame, skip: list[str], batch_events: float
) -> None:
    """Charge each operator's Python worker round trips (``trips``, see :func:`python_round_trips`) at PySpark's own
    CPU per task on this machine (the rows'
    ``python_task_cpu_ms``, see ``core.python_task_cpu``), where nothing split its CPU per task from its own runs
    (``skip``); ``ops`` is indexed by operator, changed in place.

    A floor, not a split: the user's code may pay more per task (its own set-up), which stays per event, and
    :func:`fit_task_costs` still splits the whole from two configurations."""
    if "python_task_cpu_ms" not in rows:
        return
    floor = pd.to_numeric(rows["python_task_cpu_ms"], errors="coerce").median()
    if not floor > 0:
        return
    for op, count in zip(ops.index, trips):
        if count > 0 and op not in skip:
            _charge_per_task(ops, op, floor * count, float(ops.at[op, "tasks"]), batch_events)


_UNEVEN_RECORDS = (
    1.5  # a stage's tasks must hold this many times the fewest records (at least 1) for a line through them
)
_MIN_TASKS_FITTED = 6


def split_by_task_records(
    ops: pd.DataFrame, per_task: pd.DataFrame, uncontended: pd.Series, trips: np.ndarray, batch_events: float
) -> list[str]:
    """Move what each JVM stage's tasks pay whatever their records out of its costs per event, where its tasks hold
    uneven records (a shuffle by key); returns the operators split. ``ops`` is indexed by operator, changed in place.

    Batches of one configuration cannot tell a stage's cost per task from its cost per event (the same tasks, about
    the same events), but its tasks can where their records differ: a line through their time (and CPU) against their
    records, by non-negative least squares, puts the fixed part at zero records.
    What is left after the state commit (``commit_ms``) is waiting per task; the fixed CPU, CPU per task.
    Only stages that ran no more tasks at once than CPUs (the time of a task that queued for a CPU is not its own)
    and run no Python (their per-task costs have their own readings)."""
    done = []
    jvm = trips == 0  # no Python plan node (those are all round trips) and no Python data source scan
    for op, jvm, alone in zip(ops.index, jvm, uncontended.to_numpy(dtype=bool)):
        if not (jvm and alone) or op not in per_task.index.get_level_values("operator"):
            continue
        tasks = per_task.loc[op]
        records = tasks["records_in"].to_numpy(dtype=float)
        if len(records) < _MIN_TASKS_FITTED or records.max() < _UNEVEN_RECORDS * max(records.min(), 1.0):
            continue
        design = np.column_stack([np.ones_like(records), records])
        (fixed, _), _ = nnls(design, tasks["work"].to_numpy(dtype=float))
        (fixed_cpu, _), _ = nnls(design, tasks["cpu"].to_numpy(dtype=float))
        n = max(float(ops.at[op, "tasks"]), 1.0)
        _charge_per_task(ops, op, min(fixed_cpu, fixed), n, batch_events)
        _charge_waiting_per_task(ops, op, fixed, n, batch_events)
        done.append(op)
    return done


def python_round_trips(labels: pd.Series, python_source: bool) -> np.ndarray:
    """How many Python worker round trips each operator's tasks make: one per Python plan node in its label (a
    node that repeats counts once: the label lists names), and one for a scan where the stream reads only Python
    data sources (their readers run in the workers, under a scan node of their own name)."""
    nodes = labels.str.replace(r"^j\d+\.d\d+:", "", regex=True).str.replace(r"#\w+$", "", regex=True).str.split("+")
    python = nodes.map(lambda names: sum(bool(re.search(PYTHON_PLAN_NODES, n)) for n in names))
    scans = nodes.map(lambda names: any(re.search(SCAN_PLAN_NODES, n) for n in names))
    return (python + (scans & python_source)).to_numpy(dtype=int)


def reads_python_source(rows: pd.DataFrame) -> bool:
    """Whether every source of the stream is a Python data source (the rows' ``source_kinds``)."""
    if "source_kinds" not in rows:
        return False
    kinds = {kind for value in rows["source_kinds"].dropna() for kind in str(value).split(",") if kind}
    return kinds == {"python"}


_DISTINCT_BATCH_SIZES = 1.3  # a window's largest batch must hold this many times its smallest's events
_MIN_SIZED_BATCHES = 4  # at least two at either end of the sizes


def split_by_batch_size(
    ops: pd.DataFrame, per_stage: pd.DataFrame, python_batch_ms: pd.Series, shares: pd.Series, skip: list[str]
) -> list[str]:
    """Move each Python operator's CPU per task out of its CPU per event where the window's batches differ in size;
    returns the operators split. ``ops`` is indexed by operator, changed in place.

    Batches of one configuration run the same tasks, so a stage's CPU per batch is ``y = c * e + t * n`` with ``n``
    fixed: where their events ``e`` differ (a backlog's catch-up batches at the cap beside steady ones), a least-squares
    line through the batches separates ``c`` from ``t``, from one configuration and whatever the CPUs' contention.
    The CPU per batch is the stage's executor CPU plus its share of the Python workers' (``shares``)."""
    done = []
    for op in ops.index[runs_python(ops.index.to_series())]:
        if op in skip or op not in per_stage.index.get_level_values("operator"):
            continue
        stage = per_stage.loc[op]
        python = python_batch_ms.reindex(stage.index).to_numpy(dtype=float) * float(shares.get(op, 0.0))
        known = ~np.isnan(python)
        events = stage["events"].to_numpy(dtype=float)[known]
        if not _sizes_differ(events, halves=False):
            continue
        cpu = stage["cpu"].to_numpy(dtype=float)[known] + python[known]
        tasks = stage["tasks"].to_numpy(dtype=float)[known]
        (_, per_task), _ = nnls(np.column_stack([events, tasks]), cpu)
        _charge_per_task(ops, op, per_task, float(tasks.mean()), float(events.mean()))
        done.append(op)
    return done


def split_waiting_by_batch_size(ops: pd.DataFrame, per_stage: pd.DataFrame, uncontended: pd.Series) -> None:
    """Move what each Python operator's tasks wait whatever their records out of its waiting per event, where the
    window's batches differ in size and its tasks did not share CPUs (``uncontended``: a queued task's time is not its
    own). ``ops`` is indexed by operator, changed in place, after its CPU per task is
    known (:func:`split_by_batch_size`, :func:`charge_round_trips`).

    As with the CPU, a line through the stage's tasks' time per batch against its events puts what its tasks take
    whatever their data at zero events; past their CPU and state commit per task, that is waiting per task: a state
    function's worker set-up per call, paid once per task at once, where it was charged per event."""
    for op in ops.index[runs_python(ops.index.to_series())]:
        if not bool(uncontended.get(op, False)) or op not in per_stage.index.get_level_values("operator"):
            continue
        stage = per_stage.loc[op]
        events = stage["events"].to_numpy(dtype=float)
        if not _sizes_differ(events, halves=True):
            continue
        tasks = stage["tasks"].to_numpy(dtype=float)
        (_, fixed), _ = nnls(np.column_stack([events, tasks]), stage["work"].to_numpy(dtype=float))
        _charge_waiting_per_task(ops, op, fixed, float(tasks.mean()), float(events.mean()))


def _sizes_differ(events: np.ndarray, halves: bool) -> bool:
    """Whether a window's batch sizes set a line: the largest :data:`_DISTINCT_BATCH_SIZES` times the smallest, and
    two batches at least in either third of the range (``halves``: either half), so that one odd batch cannot set it
    alone. The tasks' time, of tasks one at a time, takes halves: a catch-up's batches at the cap beside one or two
    smaller ones; the CPU, which Python workers' start-ups and samples blur, keeps the thirds."""
    if len(events) < _MIN_SIZED_BATCHES or events.min() <= 0 or events.max() < _DISTINCT_BATCH_SIZES * events.min():
        return False
    cut = (events.max() - events.min()) / (2.0 if halves else 3.0)
    return min((events <= events.min() + cut).sum(), (events >= events.max() - cut).sum()) >= 2


def _charge_waiting_per_task(ops: pd.DataFrame, op: str, fixed_ms: float, tasks: float, batch_events: float) -> None:
    """Of ``fixed_ms``, what each of ``op``'s ``tasks`` takes whatever its records, move what its CPU and state commit
    per task do not account for out of its waiting per event (batches of ``batch_events``), at most all of it."""
    n = max(tasks, 1.0)
    paid = float(ops.at[op, "task_cpu_ms"]) + float(ops.at[op, "commit_ms"]) + float(ops.at[op, "task_wait_ms"])
    moved = min(max(0.0, fixed_ms - paid) * n / batch_events, float(ops.at[op, "wait_ms_per_event"]))
    ops.at[op, "wait_ms_per_event"] -= moved
    ops.at[op, "task_wait_ms"] += moved * batch_events / n


_DISTINCT_TASK_DENSITY = 1.5  # tasks per event must differ this much between two configurations to separate the costs


def fit_task_costs(current: StreamProfile, earlier: StreamProfile) -> StreamProfile:
    """``current`` with each operator's CPU split into CPU per event and CPU per task, from two configurations.

    Some CPU is paid per task whatever its data: a Python task's worker round trip, task
    deserialization, a state store's commit. One configuration cannot tell it from CPU
    per event (every batch has the same tasks and about the same events), so a profile
    charges it per event, and predicts it to grow with a larger batch and to shrink
    when more tasks share it, where it really grows with the tasks. Two configurations whose tasks per
    event differ give two equations per operator, CPU per batch ``y = c * e + t * n``,
    solved for ``c`` (per event) and ``t`` (per task). The fit is anchored at
    ``current``: where a solution is negative, the cost stays all per event (``t < 0``)
    or becomes all per task (``c < 0``) so that ``current``'s own batches are predicted
    as measured. Operators not in both, or whose tasks per event differ less than
    1.5x, keep their profile (and stay in :meth:`StreamProfile.per_task_reading`), as do
    those ``current``'s own Python CPU samples already split (see :mod:`dagster_reconf.core.scaling.python_cpu_split`).
    """
    ops = current.operators.copy()
    before = earlier.operators.set_index("operator")
    fitted = set(current.task_costs_fitted)
    for i, row in ops.iterrows():
        if row["operator"] not in before.index or row["operator"] in fitted:
            continue
        old = before.loc[row["operator"]]
        e1, n1 = earlier.events_per_batch, float(old["tasks"])
        e2, n2 = current.events_per_batch, float(row["tasks"])
        y1 = float(old["cpu_ms_per_event"]) * e1 + float(old["task_cpu_ms"]) * n1
        y2 = float(row["cpu_ms_per_event"]) * e2 + float(row["task_cpu_ms"]) * n2
        densities = sorted((n1 / e1, n2 / e2)) if min(e1, e2) > 0 and min(n1, n2) > 0 else None
        if densities is None or densities[1] < _DISTINCT_TASK_DENSITY * densities[0]:
            continue
        det = e1 * n2 - e2 * n1
        per_event, per_task = (y1 * n2 - y2 * n1) / det, (e1 * y2 - e2 * y1) / det
        if per_task < 0:
            per_event, per_task = y2 / e2, 0.0
        elif per_event < 0:
            per_event, per_task = 0.0, y2 / n2
        ops.loc[i, ["cpu_ms_per_event", "task_cpu_ms"]] = [per_event, per_task]
        fitted.add(row["operator"])
    return replace(current, operators=ops, task_costs_fitted=frozenset(fitted))
