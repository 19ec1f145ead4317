"""Measure a :class:`~dagster_reconf.core.scaling.profile.StreamProfile` from a window of a stream's traces and
progress: useful time per operator and source event, its CPU and waiting, fixed costs and coordination (see
``docs/profile.md``). Leading batches of a configuration that is still warming are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dagster_reconf.core.scaling.cost_split import (
    charge_round_trips,
    python_round_trips,
    queueing,
    reads_python_source,
    split_by_batch_size,
    split_by_task_records,
    split_python_cpu_per_task,
    split_waiting_by_batch_size,
    state_commit_per_task,
)
from dagster_reconf.core.scaling.profile import (
    FILE_SCAN_PLAN_NODES,
    OPERATOR_COLUMNS,
    SCAN_PLAN_NODES,
    USEFUL_ACTIVITIES,
    ProfileError,
    StreamProfile,
    runs_python,
    wave_parallelism,
)
from dagster_reconf.core.scaling.scaling_plan import Knobs

__all__ = ["WARMING_EXCESS", "profile_stream", "still_warming"]

# A task's columns that add up over its stage and operator, and their names there.
_TASK_COLUMNS = {"duration": "work", "cpu_ms": "cpu", "records_in": "records_in", "records_out": "records_out"}
_TOTALS = {name: (name, "sum") for name in _TASK_COLUMNS.values()}


def profile_stream(
    activities: pd.DataFrame,
    progress: pd.DataFrame,
    knobs: Knobs,
    *,
    warmup_batches: int = 1,
    cpus: float = float("inf"),
) -> StreamProfile:
    """Profile the operators of the batches in ``progress`` from their ``activities``.

    Args:
        activities: the normalized activity table (``traces.activities``) covering the batches.
        progress: progress rows (``metrics.progress_row``) of one configuration, one per batch.
        knobs: the knobs the batches ran with.
        warmup_batches: first batches left out (a restarted query warms up), and then those still warming
            (:func:`still_warming`).
        cpus: CPUs the task slots share (local mode: the machine's; a cluster: unbounded).

    Raises:
        ProfileError: no data batch with both progress and task traces in the window.
    """
    rows = progress[progress["events"] > 0].sort_values("batch_id").iloc[warmup_batches:]
    rows = rows[~still_warming(rows)]
    timeline = activities[activities["src_worker"].isna() & _of_batches(activities, rows)]
    timeline = timeline[timeline["status"] == "success"]
    if rows.empty or timeline.empty:
        raise ProfileError(
            f"no data batch in the window has both progress and task traces ({len(rows)} batches with events, "
            f"{len(timeline)} task activities); let the stream run longer or widen the window"
        )
    batches = rows.set_index("batch_id")
    timeline = timeline.assign(duration=timeline["end_ms"] - timeline["start_ms"])
    if "cpu_ms" not in timeline:
        timeline = timeline.assign(cpu_ms=0.0)  # traces without CPU time: all useful time counts as waiting (linear)
    useful = timeline[timeline["activity"].isin(USEFUL_ACTIVITIES)]

    per_task = (
        useful.groupby(["operator", "batch_id", "task_id"], sort=False)[list(_TASK_COLUMNS)]
        .sum()
        .rename(columns=_TASK_COLUMNS)
    )
    per_stage = per_task.groupby(["operator", "batch_id"]).agg(
        **_TOTALS,
        tasks=("work", "size"),
        slowest=("work", "max"),
        median_task=("work", "median"),
        most_records=("records_in", "max"),
    )
    spans = timeline.groupby(["operator", "batch_id"]).agg(lo=("start_ms", "min"), hi=("end_ms", "max"))
    per_stage = per_stage.join((spans["hi"] - spans["lo"]).rename("span"), how="inner")
    batch_ids = per_stage.index.get_level_values("batch_id")
    per_stage["events"] = batches.loc[batch_ids, "events"].to_numpy()
    tasks = per_stage["tasks"].to_numpy(dtype=np.float64)
    at_once = np.minimum(tasks, knobs.cores)
    parallel = wave_parallelism(tasks, at_once)
    per_stage["records_ratio"] = _most_records_over_mean(per_stage)
    per_stage["hot"] = _hot_task_excess(per_task).reindex(per_stage.index).fillna(0.0)
    # Tasks at once end with the one holding the most records: its excess over the mean task is the stage's skew
    # (record_skew, predicted for any knobs by StreamProfile.stage_lines), not a cost per batch. With more tasks at
    # once than CPUs, which task ends last is which queued most: that stays in the overhead, as measured.
    hot = np.where((at_once > 1) & (at_once <= cpus), per_stage["hot"], 0.0)
    per_stage["overhead"] = np.maximum(0.0, per_stage["span"] - per_stage["work"] / parallel - hot)

    stage_time = per_stage.groupby("batch_id")["span"].sum()
    batch_ms = batches.loc[stage_time.index, "batch_duration_ms"].astype(float)
    coordination = float(np.median(np.maximum(0.0, batch_ms - stage_time)))
    total_events = float(batches.loc[stage_time.index, "events"].sum())

    ops = per_stage.groupby("operator").agg(
        **_TOTALS,
        tasks=("tasks", "median"),
        overhead_ms=("overhead", "median"),
        skew=("slowest", "sum"),
        median_task=("median_task", "sum"),
        records_ratio=("records_ratio", "median"),
        hot_ms=("hot", "median"),
    )
    depth = ops.index.to_series().str.extract(r"^j(?P<job>\d+)\.d(?P<depth>\d+):")
    ops["depth"] = depth["depth"].fillna(0).astype(int).to_numpy()
    ops["job"] = depth["job"].fillna(0).astype(int).to_numpy()
    labels = ops.index.to_series()
    scans = labels.str.contains(SCAN_PLAN_NODES).to_numpy()
    file_scans = labels.str.contains(FILE_SCAN_PLAN_NODES).to_numpy()
    ops["kind"] = np.where(
        scans & (knobs.source_partitions is not None),
        "source",
        np.where(
            file_scans,
            "split",
            np.where(scans, "fixed", np.where(ops["tasks"] == knobs.state_partitions, "shuffle", "fixed")),
        ),
    )
    profiled = rows.loc[rows["batch_id"].isin(stage_time.index)]
    python_batch_ms = _python_batch_cpu_ms(progress, profiled)
    python_ms = _python_cpu_ms_per_event(python_batch_ms, profiled)
    shares = pd.Series(_python_shares(ops) if python_ms is not None else 0.0, index=ops.index)
    ops["cpu"] += (python_ms or 0.0) * total_events * shares
    seconds = ops["work"] / 1000.0
    ops["work_ms_per_event"] = ops["work"] / total_events
    # CPU time cannot exceed what the stage's tasks had of the CPUs: their time, over the CPUs they shared.
    concurrent = np.minimum(ops["tasks"], knobs.cores)
    cpu = np.minimum(ops["cpu"], ops["work"] * np.minimum(concurrent, cpus) / concurrent) / total_events
    ops["cpu_ms_per_event"] = cpu
    wait = np.maximum(0.0, ops["work_ms_per_event"] - cpu)
    queue, slowest = queueing(
        per_task,
        ops["work_ms_per_event"],
        wait,
        cpu * concurrent / np.minimum(concurrent, cpus),
        ops["overhead_ms"],
        shared=concurrent > cpus,
    )
    ops["wait_ms_per_event"] = wait - queue  # see waiting_reading and queued_reading
    ops["queue_ms_per_event"] = queue
    ops["overhead_ms"] -= slowest  # the slowest task's queueing, a cost per batch like the rest of its overhead
    ops["slowest_queue_ms"] = slowest
    ops["records_in_per_event"] = ops["records_in"] / total_events
    ops["selectivity"] = np.where(
        ops["records_in"] > 0, ops["records_out"] / ops["records_in"].where(ops["records_in"] > 0, 1), np.nan
    )
    ops["true_processing_rate"] = np.where(seconds > 0, ops["records_in"] / seconds.where(seconds > 0, 1), np.nan)
    ops["true_output_rate"] = np.where(seconds > 0, ops["records_out"] / seconds.where(seconds > 0, 1), np.nan)
    ops["skew"] = np.where(
        ops["median_task"] > 0, ops["skew"] / ops["median_task"].where(ops["median_task"] > 0, 1), 1.0
    )
    ops["task_cpu_ms"] = 0.0  # batch totals cannot tell CPU per task from CPU per event: see fit_task_costs
    ops["task_wait_ms"] = 0.0
    ops["commit_ms"] = state_commit_per_task(ops, rows[rows["batch_id"].isin(stage_time.index)], total_events)
    fitted = split_python_cpu_per_task(ops, timeline, rows, batches, uncontended=concurrent <= cpus)
    if python_batch_ms is not None:
        fitted += split_by_batch_size(ops, per_stage, python_batch_ms, shares, skip=fitted)
    batch_events = total_events / max(len(stage_time), 1)
    trips = python_round_trips(ops.index.to_series(), reads_python_source(profiled))
    charge_round_trips(ops, trips, profiled, skip=fitted, batch_events=batch_events)
    split_waiting_by_batch_size(ops, per_stage, concurrent <= cpus)
    fitted += split_by_task_records(ops, per_task, concurrent <= cpus, trips, batch_events)
    ops["record_skew"] = _record_skew(ops, batch_events).where(concurrent <= cpus, 1.0)
    ops = ops.reset_index().sort_values(["job", "depth"], ascending=[True, False], ignore_index=True)
    return StreamProfile(
        operators=ops[OPERATOR_COLUMNS],
        coordination_ms=coordination,
        batches=int(len(stage_time)),
        events_per_batch=float(batches["events"].median()),
        batch_ms=float(batches["batch_duration_ms"].median()),
        knobs=knobs,
        cpus=cpus,
        python_cpu_ms_per_event=python_ms,
        task_costs_fitted=frozenset(fitted),
    )


def _record_skew(ops: pd.DataFrame, batch_events: float) -> pd.Series:
    """Each operator's hot task's work per event over its tasks' mean: how much longer the task with the most records
    takes (``hot_ms``) over a mean task's work per event (batches of ``batch_events``), held to 1 at least and to its
    records over the mean at most. Only where its tasks did not share CPUs (see ``profile_stream``).

    Where records drive the work (a shuffle by key, files of uneven size), the two agree. Where they do not (a state
    store's save after partial aggregation: a few records and a commit each), the records overstate the excess; and
    costs per task, the same for every task, are no part of it."""
    mean_part = (ops["cpu_ms_per_event"] + ops["wait_ms_per_event"]) * batch_events / ops["tasks"].clip(lower=1)
    excess = (ops["hot_ms"] / mean_part.where(mean_part > 0)).fillna(0.0)
    return (1.0 + excess).clip(lower=1.0, upper=ops["records_ratio"].clip(lower=1.0))


def _most_records_over_mean(per_stage: pd.DataFrame) -> pd.Series:
    """Each stage's task with the most records over its tasks' mean, per batch (1 where they hold none)."""
    mean = per_stage["records_in"] / per_stage["tasks"].clip(lower=1)
    return (per_stage["most_records"] / mean.where(mean > 0)).fillna(1.0).clip(lower=1.0)


def _hot_task_excess(per_task: pd.DataFrame) -> pd.Series:
    """Per stage and batch, how much longer its task with the most records took than its tasks' mean (at least 0)."""
    stages = per_task.groupby(level=["operator", "batch_id"], sort=False)
    hot = per_task["work"].loc[stages["records_in"].idxmax()].droplevel("task_id")
    return (hot - stages["work"].mean()).clip(lower=0.0)


WARMING_EXCESS = 0.10  # a leading batch this much slower than the newest half's, and no larger, is still warming


def still_warming(rows: pd.DataFrame) -> np.ndarray:
    """Which of a configuration's data batches ``rows`` (in order) lead its window while it still warms up: each
    more than :data:`WARMING_EXCESS` slower than the median of the newest half, and no larger than its median batch by
    as much (a larger batch may be slower for its size); the first that is not ends the run. Fewer than 4: none.

    The JVM compiles a new configuration's hot paths, and its driver's scheduling speeds up, over more batches than
    the Python workers take to start. Only the profile leaves them out: the policy's signal and its window
    count keep them, so the decision comes no later."""
    warming = np.zeros(len(rows), dtype=bool)
    if len(rows) < 4:  # too few to tell a trend from noise
        return warming
    duration = pd.to_numeric(rows["batch_duration_ms"], errors="coerce").to_numpy(dtype=float)
    events = pd.to_numeric(rows["events"], errors="coerce").to_numpy(dtype=float)
    newest = np.arange(len(rows)) >= len(rows) - len(rows) // 2
    slower = duration > (1.0 + WARMING_EXCESS) * np.median(duration[newest])
    no_larger = events <= (1.0 + WARMING_EXCESS) * np.median(events[newest])
    return np.cumprod(slower & no_larger).astype(bool)


def _of_batches(activities: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Which activities belong to the batches in ``rows``: same query id and batch id where the progress has the
    query id (helper queries of the control plane and other queries in the driver have their own), else batch id."""
    if "query_id" in rows and "query_id" in activities and rows["query_id"].notna().all():
        wanted = pd.MultiIndex.from_arrays([rows["query_id"].astype(str), rows["batch_id"].astype("int64")])
        return pd.MultiIndex.from_arrays([activities["query_id"].astype(str), activities["batch_id"]]).isin(wanted)
    return activities["batch_id"].isin(rows["batch_id"]).to_numpy()


def _python_batch_cpu_ms(progress: pd.DataFrame, rows: pd.DataFrame) -> pd.Series | None:
    """Python workers' CPU milliseconds of each batch in ``rows`` (NaN where unknown), None where not recorded.

    ``python_cpu_s`` is a counter sampled at each batch's end: a batch's CPU is its
    growth since the batch before (a counter that fell belongs to a new session).
    """
    if "python_cpu_s" not in progress or rows.empty:
        return None
    ordered = progress.drop_duplicates("batch_id", keep="last").sort_values("batch_id")
    counter = ordered.set_index("batch_id")["python_cpu_s"].astype(float)
    ids = counter.index.to_series()
    delta = counter.diff().where((ids.diff() == 1) & (counter.diff() >= 0))
    return 1000.0 * delta.reindex(rows["batch_id"].to_numpy())


def _python_cpu_ms_per_event(batch_cpu: pd.Series | None, rows: pd.DataFrame) -> float | None:
    """Python workers' CPU milliseconds per source event over the batches whose CPU is known."""
    if batch_cpu is None:
        return None
    known = batch_cpu.notna().to_numpy()
    events = rows["events"].to_numpy(dtype=float)[known]
    if not known.any() or events.sum() <= 0:
        return None
    return float(batch_cpu.to_numpy()[known].sum()) / float(events.sum())


def _python_shares(ops: pd.DataFrame) -> np.ndarray:
    """How the Python workers' CPU divides over operators: the Python stages, by their waiting time."""
    waiting = np.maximum(0.0, (ops["work"] - ops["cpu"]).to_numpy(dtype=float))
    python = runs_python(ops.index.to_series())
    weights = waiting * python if (waiting * python).sum() > 0 else waiting
    return weights / weights.sum() if weights.sum() > 0 else np.zeros(len(ops))
