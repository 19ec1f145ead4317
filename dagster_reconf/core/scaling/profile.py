"""What each logical operator of a stream costs, measured from its traces and progress.

DS2 measures *useful time*: the time an operator instance spends deserializing,
processing and serializing, not waiting for input or output. Here it is summed per
logical operator (a stage stable across batches, see ``traces.activities``) over the
tasks of the micro-batches in a window, and divided by the source events those
batches consumed, so every operator's cost is in the same unit: core-milliseconds per
source event (``work_ms_per_event``). Beside it, DS2's own figures per operator: true
processing rate (records in per second of useful time), true output rate, selectivity.

A micro-batch also pays time that no task spends: planning, offset and commit logs,
state commits, scheduling between stages. That is ``coordination_ms`` per batch: the
batch's duration (``triggerExecution``) minus the wall-clock spans of its stages.
And each stage pays a fixed part (task launch, the slowest task's excess) that does
not shrink with more cores: ``overhead_ms``, the stage span left after its work is
divided over the tasks that ran in parallel.

Task slots are not always CPUs. ``local[8]`` on a 2-CPU machine runs 8 tasks at once,
so a CPU-bound stage stops speeding up at 2 tasks while one whose tasks wait on I/O
does not. DS2 assumes scaling is linear; here it is linear only until the CPUs are busy.
So useful time is split by Spark's executor CPU time: ``cpu_ms_per_event`` (c) and
``wait_ms_per_event`` (s, the rest). With ``q`` tasks at once on ``P`` CPUs
(``m = min(q, P)`` of them computing), a stage takes per event the longer of its CPU
work over the CPUs and its tasks' own time over the tasks: ``max(c / m, (c + s) / q)``
(a roofline: the CPUs or the tasks bound it). ``P`` is the machine's CPU count in local
mode and unbounded on a cluster (a slot per CPU). Where the stage ran more tasks than
CPUs, its tasks' measured time may hold up to its CPU over the CPUs of queueing for a
CPU (Brent's bound: see :meth:`StreamProfile.contended_batch_ms_for`), and their mean
cannot tell how much. The tasks themselves can, where they hold as many records each (a
source's partitions): they do the same work, so the fastest per record queued least,
and the mean's excess over it is queueing (``queue_ms_per_event``), as is the slowest
task's time beyond its records (``slowest_queue_ms``, see ``_queueing``), paid again by
knobs with as many tasks at once or more. The rest is read as waiting, still the slow
side (the fastest task queued some too: a scale-down is never planned on a guess).
:meth:`StreamProfile.waiting_reading` (the whole mean waiting) and
:meth:`StreamProfile.queued_reading` (all of it queueing, up to Brent's bound) give the
ends of that band (see the plan's ``batch_ms_planned_high`` and ``batch_ms_planned_low``).

Stages that run Python (a Python data source scan, ``mapInArrow``, pandas UDFs) spend
their CPU in Python worker processes, which Spark's executor CPU time leaves out. In
local mode the runtime records those workers' CPU with every batch (``python_cpu_s``,
see ``core.python_workers``); per event it is added to the CPU part of the stages
whose plan nodes run Python, in proportion to their waiting time (measured: a
self-join's Python scans spent 0.7-0.9 ms of CPU per event that the metrics called
waiting, so at 11 tasks on 2 CPUs they ran 40 % slower than a linear model said).

Which stage reads the source is read from its plan (a ``Scan`` node), not guessed from task
counts, and how its tasks change with the knobs depends on the source: ``source`` stages
follow the source-partitions knob where the stream has one (a Python source's partitions,
Kafka's ``minPartitions``); Spark's file source splits a batch's files by bytes per core,
so its ``split`` stages follow the cores (at least the tasks measured); other scans keep
their tasks (``fixed``, e.g. one per Kafka partition).

A stateful stage's tasks each commit their state store partition once a batch, whatever
the batch's size: Spark reports that time (``commitTimeMs``, the ``state_commit_ms`` of a
progress row), and it is moved out of the stage's waiting per event into a wait per task
(``task_wait_ms``, ``w``: ``n * w / q`` on the tasks' side of the roofline). Charged per
event it would grow with a larger batch (measured: a self-join at 750 events a batch spent
620-680 ms of its 750 ms of join work committing).
Beyond its commit, a JVM stage whose tasks hold uneven records (a shuffle by key) shows what
it pays per task itself: a line through its tasks' time and CPU against their records
(``_split_by_task_records``).

Some CPU is paid per task, not per event: a Python task's worker set-up, task
deserialization. Batch totals cannot tell the two apart (every batch of a configuration
has the same tasks); *when* the Python workers spent their CPU can, in local mode, where
the runtime samples it ten times a second: set-up comes in a burst as each task starts
(see :mod:`dagster_reconf.core.scaling.python_cpu_split`). Where a window's batches differ in size (a backlog's catch-up
batches at the cap beside steady ones), a line through their CPU per batch does, from one
configuration whatever the CPUs' contention (``_split_by_batch_size``). Otherwise each
Python worker round trip a task makes (a Python plan node, a scan of a Python data source)
is charged at least PySpark's own CPU per task on this machine, which the runtime measures
once on a trivial task (``python_task_cpu_ms`` of the rows, see ``core.python_task_cpu``),
and the rest stays per event; once the stream has run under two configurations whose tasks
per event differ, :func:`fit_task_costs` separates them. The per-task part
(``task_cpu_ms``, ``t``) is a fixed cost of the stage that grows with its ``n`` tasks:
``n * t / m`` on the CPU side of the roofline, ``n * t / q`` on the tasks' side, except
where a plan puts more tasks at once than CPUs on a stage measured without that
contention: the tasks start together, and their set-ups queue for the CPUs before any of
them reaches its events, so the tasks' side pays ``n * t / m`` too (measured: a
self-join's Python scans, about 100 ms of set-up per task split from their samples at 1
task each, planned to 12 tasks on 2 CPUs: 3.27 s predicted this way for 2.97 s measured,
2.07 s from the same window without its samples; with larger batches later tasks' waits
hide some of the set-ups, so the band's short end is the plain roofline). Where
neither separated them, a Python stage's CPU may be anything from all per event to all
per task. And the roofline is a lower bound: tasks that share CPUs end no later than the
sum of the two lines (Brent's bound), and a configuration measured without that
contention cannot tell where between. :meth:`StreamProfile.batch_ms_band` spans these
readings, and a plan reports the band beside its prediction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dagster_reconf.core.errors import ReconfError
from dagster_reconf.core.scaling.python_cpu_split import split_python_cpu
from dagster_reconf.core.scaling.scaling_plan import Knobs

__all__ = ["OPERATOR_COLUMNS", "ProfileError", "StreamProfile", "fit_task_costs", "profile_stream", "still_warming"]


USEFUL_ACTIVITIES = ("deserialization", "processing", "serialization")
OPERATOR_COLUMNS = [
    "operator",
    "kind",
    "depth",
    "tasks",
    "work_ms_per_event",
    "cpu_ms_per_event",
    "wait_ms_per_event",
    "records_in_per_event",
    "selectivity",
    "true_processing_rate",
    "true_output_rate",
    "overhead_ms",
    "skew",
    "task_cpu_ms",
    "task_wait_ms",
    "queue_ms_per_event",
    "slowest_queue_ms",
]


class ProfileError(ReconfError, ValueError):
    """The traces and progress of a window are not enough to profile the stream."""


@dataclass(frozen=True)
class StreamProfile:
    """Per-operator costs and per-batch coordination of a stream, at the knobs it ran with."""

    operators: pd.DataFrame  # OPERATOR_COLUMNS, one row per logical operator
    coordination_ms: float  # per batch, not spent in any stage
    batches: int  # data batches the figures come from
    events_per_batch: float  # median
    batch_ms: float  # median batch duration
    knobs: Knobs
    cpus: float = float("inf")  # CPUs the task slots share (local mode: the machine's)
    python_cpu_ms_per_event: float | None = None  # Python workers' CPU, where measured (local mode)
    task_costs_fitted: frozenset[str] = frozenset()  # operators whose costs per task were separated (samples, batch
    # sizes, task records, or two configurations: fit_task_costs)

    @property
    def work_ms_per_event(self) -> float:
        """Core-milliseconds all operators spend per source event (DS2's useful time, summed)."""
        return float(self.operators["work_ms_per_event"].sum())

    @cached_property
    def _columns(self) -> dict[str, np.ndarray]:
        """The operator columns the predictions read, as numpy (a planner evaluates thousands of knobs)."""
        ops = self.operators
        numbers = {
            name: ops[name].to_numpy(dtype=np.float64)
            for name in ("tasks", "cpu_ms_per_event", "wait_ms_per_event", "overhead_ms", "task_cpu_ms", "task_wait_ms")
        }
        for name in ("queue_ms_per_event", "slowest_queue_ms"):  # 0 in a profile built without them
            numbers[name] = ops[name].to_numpy(dtype=np.float64) if name in ops else np.zeros(len(ops))
        return {
            **numbers,
            "source": (ops["kind"] == "source").to_numpy(dtype=bool),
            "shuffle": (ops["kind"] == "shuffle").to_numpy(dtype=bool),
            "split": (ops["kind"] == "split").to_numpy(dtype=bool),
        }

    def tasks(self, knobs: Knobs) -> np.ndarray:
        """Tasks each operator runs per batch under ``knobs`` (its partitions)."""
        col = self._columns
        return np.where(
            col["source"],
            float(knobs.source_partitions or 1),
            np.where(
                col["shuffle"],
                float(knobs.state_partitions),
                np.where(col["split"], np.maximum(col["tasks"], float(knobs.cores)), col["tasks"]),
            ),
        )

    def parallelism(self, knobs: Knobs) -> np.ndarray:
        """Tasks of each operator that can run at once under ``knobs``."""
        return np.minimum(self.tasks(knobs), knobs.cores)

    def _lines(
        self, knobs: Knobs, *, queued_set_ups: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each stage's time as two lines in the batch's events ``e``: its CPU over the CPUs (``a*e + b``) and its
        tasks' own time over the tasks at once (``a2*e + b2``); the stage takes the longer (see module docstring).
        ``queued_set_ups``: the tasks' side pays their set-ups over the CPUs where ``knobs`` brings contention
        that the stage was measured without."""
        col = self._columns
        n, q = self.tasks(knobs), self.parallelism(knobs)
        m = np.minimum(q, self.cpus)
        per_task = n * col["task_cpu_ms"]
        cpu = col["cpu_ms_per_event"]
        again = self._queue_again(q)
        wait = col["wait_ms_per_event"] + np.where(again, col["queue_ms_per_event"], 0.0)
        slowest = np.where(again, col["slowest_queue_ms"], 0.0)
        queued = (q > m) & ~self._measured_shared if queued_set_ups else False
        tasks_side = np.where(queued, per_task / m, per_task / q) + n * col["task_wait_ms"] / q
        return cpu / m, per_task / m + slowest, (cpu + wait) / q, tasks_side + slowest

    def _queue_again(self, parallelism: np.ndarray) -> np.ndarray:
        """Stages that run as many tasks at once (``parallelism``) as measured, or more: they queue at least as they
        did, so the queueing read out of their tasks' time (``queue_ms_per_event``, ``slowest_queue_ms``) comes back."""
        return parallelism >= self._measured_parallelism

    @cached_property
    def _measured_parallelism(self) -> np.ndarray:
        return self.parallelism(self.knobs)

    @cached_property
    def _measured_shared(self) -> np.ndarray:
        """Stages that ran more tasks at once than CPUs where measured: their figures hold that contention."""
        return self._measured_parallelism > self.cpus

    def stage_ms_per_event(self, knobs: Knobs) -> np.ndarray:
        """Wall-clock milliseconds each stage adds per source event under ``knobs``: ``max(c / m, (c + s) / q)``."""
        a, _, a2, _ = self._lines(knobs)
        return np.maximum(a, a2)

    def stage_fixed_ms(self, knobs: Knobs) -> np.ndarray:
        """What each stage costs per batch whatever the batch's size: ``o + max(n * t / m, n * (t + w) / q)``.

        ``o`` is the stage's measured overhead, ``t`` the CPU each of its ``n`` tasks
        spends whatever its data (see :func:`fit_task_costs`), spread over the ``m``
        tasks computing at once (no more than the CPUs), ``w`` what each task waits whatever
        its data (a state store's commit), over the ``q`` tasks at once.
        """
        _, b, _, b2 = self._lines(knobs)
        return self._columns["overhead_ms"] + np.maximum(b, b2)

    def fixed_ms_for(self, knobs: Knobs) -> float:
        """What a batch costs under ``knobs`` whatever its size: coordination plus every stage's fixed costs."""
        return self.coordination_ms + float(self.stage_fixed_ms(knobs).sum())

    @cached_property
    def _base_ms(self) -> float:
        """What every batch pays outside its stages' lines: coordination and the stages' measured overheads."""
        return self.coordination_ms + float(self._columns["overhead_ms"].sum())

    def batch_ms_for(self, events: float, knobs: Knobs, *, queued_set_ups: bool = True) -> float:
        """Predicted duration of a batch of ``events`` under ``knobs`` (stages one after another on shared cores);
        ``queued_set_ups=False``: the plain roofline, where tasks' set-ups overlap other tasks' waits."""
        a, b, a2, b2 = self._lines(knobs, queued_set_ups=queued_set_ups)
        return self._base_ms + float(np.maximum(a * events + b, a2 * events + b2).sum())

    def events_within(self, knobs: Knobs, budget_ms: float) -> float:
        """The largest batch (events) that ends within ``budget_ms`` under ``knobs``; inf where events cost nothing.

        The batch's duration is a sum of maxima of lines in ``e``: convex and piecewise
        linear, so it is evaluated at its breakpoints and interpolated on the segment
        where it crosses the budget.
        """
        return self._events_within(self._lines(knobs), budget_ms)

    def _events_within(self, lines: tuple[np.ndarray, ...], budget_ms: float) -> float:
        a, b, a2, b2 = lines
        base = self._base_ms
        with np.errstate(divide="ignore", invalid="ignore"):
            crossings = (b2 - b) / (a - a2)
        inside = crossings[np.isfinite(crossings) & (crossings > 0)]
        if not inside.size:  # one line per stage (no costs per task, say): a straight line
            fixed, slope = base + float(np.maximum(b, b2).sum()), float(np.maximum(a, a2).sum())
            if fixed > budget_ms:
                return 0.0
            return float("inf") if slope <= 0 else (budget_ms - fixed) / slope
        points = np.unique(np.concatenate([[0.0], inside]))
        durations = base + np.maximum(np.outer(points, a) + b, np.outer(points, a2) + b2).sum(axis=1)
        if durations[0] > budget_ms:
            return 0.0
        over = np.flatnonzero(durations > budget_ms)
        if over.size:
            i = int(over[0])
            e0, e1, d0, d1 = points[i - 1], points[i], durations[i - 1], durations[i]
            return float(e0 + (budget_ms - d0) * (e1 - e0) / (d1 - d0))
        slope = float(np.maximum(a, a2).sum())
        return float("inf") if slope <= 0 else float(points[-1] + (budget_ms - durations[-1]) / slope)

    def waiting_reading(self) -> "StreamProfile":
        """This profile with its stages measured with more tasks than CPUs read as their tasks' mean time and slowest
        task: none of it the queueing their least-queued tasks told apart (``queue_ms_per_event``,
        ``slowest_queue_ms``), all of it waiting or overhead (the slowest that fewer cores could be; see module
        docstring)."""
        ops = self.operators
        if "queue_ms_per_event" not in ops:
            return self
        return replace(
            self,
            operators=ops.assign(
                wait_ms_per_event=ops["wait_ms_per_event"] + ops["queue_ms_per_event"],
                queue_ms_per_event=0.0,
                overhead_ms=ops["overhead_ms"] + ops["slowest_queue_ms"],
                slowest_queue_ms=0.0,
            ),
        )

    def queued_reading(self) -> "StreamProfile":
        """This profile with the other reading of its stages measured with more tasks than CPUs: their tasks' time held
        up to their CPU over the CPUs of queueing for a CPU (Brent's bound, see :meth:`contended_batch_ms_for`), all
        of it queueing and only the rest waiting (the fastest that fewer cores could be; see module docstring)."""
        waiting = self.waiting_reading()
        a, b, _, _ = waiting._lines(self.knobs)
        q = self.parallelism(self.knobs)
        cpu_side = (a + b / max(self.events_per_batch, 1e-9)) * q  # the CPU line per event, in the tasks' time
        ops = waiting.operators
        wait = ops["wait_ms_per_event"].to_numpy(dtype=np.float64)
        return replace(
            waiting,
            operators=ops.assign(
                wait_ms_per_event=np.where(self._measured_shared, np.maximum(0.0, wait - cpu_side), wait)
            ),
        )

    def per_task_reading(self) -> "StreamProfile":
        """This profile with the other reading of its Python stages whose costs per task are not separated yet: all
        their CPU paid per task, none per event (at the tasks and events measured, the same CPU per batch)."""
        ops = self.operators
        unknown = _runs_python(ops["operator"]) & ~ops["operator"].isin(self.task_costs_fitted).to_numpy()
        per_batch = ops["cpu_ms_per_event"] * self.events_per_batch + ops["task_cpu_ms"] * ops["tasks"]
        return replace(
            self,
            operators=ops.assign(
                cpu_ms_per_event=ops["cpu_ms_per_event"].where(~unknown, 0.0),
                task_cpu_ms=ops["task_cpu_ms"].where(~unknown, per_batch / ops["tasks"].clip(lower=1)),
            ),
        )

    def contended_batch_ms_for(self, events: float, knobs: Knobs) -> float:
        """The longest a batch of ``events`` can take under ``knobs`` where its tasks share the CPUs: Brent's bound.

        The roofline (:meth:`batch_ms_for`) assumes a task's waiting overlaps other tasks'
        CPU perfectly. With more tasks at once than CPUs, a greedy scheduler's stage ends
        no later than its CPU over the CPUs *plus* its tasks' own time over the tasks (all
        work over the processors plus the critical path), and how close it comes depends on
        how the tasks' waits and CPU interleave, which a configuration measured without the
        contention cannot tell (measured: a self-join's Python scans at 12 tasks on 2 CPUs
        ran about halfway between the two).
        """
        a, b, a2, b2 = self._lines(knobs, queued_set_ups=False)  # the sum counts the set-ups' queueing once
        q = self.parallelism(knobs)
        b = b - np.where(
            self._queue_again(q), self._columns["slowest_queue_ms"], 0.0
        )  # that queueing once: tasks' side
        shared = q > self.cpus
        return self._base_ms + float((a2 * events + b2 + np.where(shared, a * events + b, 0.0)).sum())

    def batch_ms_band(self, events: float, knobs: Knobs) -> tuple[float, float]:
        """The shortest and longest a batch of ``events`` may take under ``knobs`` by what one configuration cannot tell:
        tasks that shared CPUs waiting or queueing (:meth:`queued_reading`), Python stages' CPU per event or per task
        (:meth:`per_task_reading`), tasks sharing CPUs overlapping their waits with others' CPU or not
        (:meth:`contended_batch_ms_for`), their set-ups queueing before all waits or overlapping some (measured: a
        self-join's scans at 10 tasks on 2 CPUs ran 19 % under the queued reading). :meth:`batch_ms_for` lies within."""
        per_task = self.per_task_reading()
        readings = (
            self,
            self.waiting_reading(),
            self.queued_reading(),
            per_task,
            per_task.waiting_reading(),
            per_task.queued_reading(),
        )
        low = min(reading.batch_ms_for(events, knobs, queued_set_ups=False) for reading in readings)
        return low, max(reading.contended_batch_ms_for(events, knobs) for reading in readings)

    def capacity(self, knobs: Knobs, utilization: float = 1.0) -> float:
        """Source events per second the stream sustains under ``knobs`` at ``utilization`` of the trigger interval.

        A batch of ``e`` events lasts ``C + sum_i(o_i + stage_i(e))`` (C coordination,
        o_i the stage's overhead, stage_i its roofline, see :meth:`batch_ms_for`) and must
        end within ``u * T``. Solving for ``e`` (:meth:`events_within`) gives the rate
        ``e / T``; it is 0 when the fixed costs alone exceed ``u * T`` (the trigger
        interval is too short: see the batch sizing). With T = 0 batches run back to back
        and grow with the backlog, so only the work per event bounds the rate.
        """
        lines = self._lines(knobs)
        per_event = float(np.maximum(lines[0], lines[2]).sum())
        if per_event <= 0:
            return float("inf")
        if knobs.trigger_interval_s == 0:
            return utilization * 1000.0 / per_event
        return self._events_within(lines, utilization * knobs.trigger_interval_s * 1000.0) / knobs.trigger_interval_s

    @property
    def fixed_ms(self) -> float:
        """What a batch costs whatever its size, at the knobs it was measured with."""
        return self.fixed_ms_for(self.knobs)


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

    per_task = useful.groupby(["operator", "batch_id", "task_id"], sort=False).agg(
        work=("duration", "sum"),
        cpu=("cpu_ms", "sum"),
        records_in=("records_in", "sum"),
        records_out=("records_out", "sum"),
    )
    per_stage = per_task.groupby(["operator", "batch_id"]).agg(
        work=("work", "sum"),
        cpu=("cpu", "sum"),
        records_in=("records_in", "sum"),
        records_out=("records_out", "sum"),
        tasks=("work", "size"),
        slowest=("work", "max"),
        median_task=("work", "median"),
    )
    spans = timeline.groupby(["operator", "batch_id"]).agg(lo=("start_ms", "min"), hi=("end_ms", "max"))
    per_stage = per_stage.join((spans["hi"] - spans["lo"]).rename("span"), how="inner")
    batch_ids = per_stage.index.get_level_values("batch_id")
    per_stage["events"] = batches.loc[batch_ids, "events"].to_numpy()
    parallel = np.minimum(per_stage["tasks"].to_numpy(), knobs.cores)
    per_stage["overhead"] = np.maximum(0.0, per_stage["span"] - per_stage["work"] / parallel)

    stage_time = per_stage.groupby("batch_id")["span"].sum()
    batch_ms = batches.loc[stage_time.index, "batch_duration_ms"].astype(float)
    coordination = float(np.median(np.maximum(0.0, batch_ms - stage_time)))
    total_events = float(batches.loc[stage_time.index, "events"].sum())

    ops = per_stage.groupby("operator").agg(
        work=("work", "sum"),
        cpu=("cpu", "sum"),
        records_in=("records_in", "sum"),
        records_out=("records_out", "sum"),
        tasks=("tasks", "median"),
        overhead_ms=("overhead", "median"),
        skew=("slowest", "sum"),
        median_task=("median_task", "sum"),
    )
    depth = ops.index.to_series().str.extract(r"^j(?P<job>\d+)\.d(?P<depth>\d+):")
    ops["depth"] = depth["depth"].fillna(0).astype(int).to_numpy()
    ops["job"] = depth["job"].fillna(0).astype(int).to_numpy()
    labels = ops.index.to_series()
    scans = labels.str.contains(_SCAN_PLAN_NODES).to_numpy()
    file_scans = labels.str.contains(_FILE_SCAN_PLAN_NODES).to_numpy()
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
    queue, slowest = _queueing(
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
    ops["task_wait_ms"] = _state_commit_per_task(ops, rows[rows["batch_id"].isin(stage_time.index)], total_events)
    fitted = _split_python_cpu(ops, timeline, rows, batches, uncontended=concurrent <= cpus)
    if python_batch_ms is not None:
        fitted += _split_by_batch_size(ops, per_stage, python_batch_ms, shares, skip=fitted)
    batch_events = total_events / max(len(stage_time), 1)
    trips = _python_round_trips(ops.index.to_series(), _reads_python_source(profiled))
    _charge_round_trips(ops, trips, profiled, skip=fitted, batch_events=batch_events)
    fitted += _split_by_task_records(ops, per_task, concurrent <= cpus, trips, batch_events)
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


WARMING_EXCESS = 0.10  # a leading batch this much slower than the newest half's, and no larger, is still warming


def still_warming(rows: pd.DataFrame) -> np.ndarray:
    """Which of a configuration's data batches ``rows`` (in order) lead its window while it still warms up: each
    more than :data:`WARMING_EXCESS` slower than the median of the newest half, and no larger than its median batch by
    as much (a larger batch may be slower for its size); the first that is not ends the run. Fewer than 4: none.

    The JVM compiles a new configuration's hot paths, and its driver's scheduling speeds up, over more batches than
    the Python workers take to start (measured: Q11 at 12 cores on 2 CPUs, batches of 750 events took 1,893, 1,709,
    1,564 ... 1,521 ms, and its coordination per batch fell from 618 to 462 ms; windows that ended later predicted the
    next configuration from +30 % down to +10 %). Only the profile leaves them out: the policy's signal and its window
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


_EVEN_RECORDS = 1.1  # a batch's tasks read as doing the same work where their records differ no more than this


def _queueing(
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
    the window its median, and ``(1 - r) * work`` of the mean was queueing. Measured on a Python scan with 8 ms of
    sleep per event, 12 tasks on 2 CPUs: mean 11.3 ms per event, ``r`` 0.84, so 9.5 ms; the same stream at 6 tasks
    took 9.4 ms. Likewise the slowest task's time beyond its records at the mean rate (its share of the stage's
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


def _state_commit_per_task(ops: pd.DataFrame, rows: pd.DataFrame, total_events: float) -> pd.Series:
    """Each stateful stage's state store commit per task (Spark's ``commitTimeMs``), moved out of its waiting per
    event; changes ``ops`` in place. A commit writes the partition's changes whatever their number, so charged per
    event it would grow with a larger batch (measured: a self-join at 750 events a batch spent 620-680 ms of its
    750 ms of join work committing). Spread over the stateful stages by their waiting, at most all of it."""
    per_task = pd.Series(0.0, index=ops.index)
    stateful = (ops["kind"] == "shuffle") & ops.index.to_series().str.contains(_STATE_PLAN_NODES).to_numpy()
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


def _split_python_cpu(
    ops: pd.DataFrame, timeline: pd.DataFrame, rows: pd.DataFrame, batches: pd.DataFrame, uncontended: pd.Series
) -> list[str]:
    """Move each Python operator's CPU per task out of its CPU per event where the workers' sampled CPU tells them
    apart (see :mod:`dagster_reconf.core.scaling.python_cpu_split`); returns the operators split. ``ops`` is indexed by operator, changed in place.

    Only operators that ran no more tasks at once than CPUs (``uncontended``): with more, the set-ups queue for
    the CPUs and smear over the stage (measured: 12 tasks on 2 CPUs read as 16-27 ms per task where two
    configurations' totals say 134), so their bursts no longer mark them."""
    if "python_cpu_samples" not in rows:
        return []
    series = [s for s in rows["python_cpu_samples"] if isinstance(s, list) and s]
    python = ops.index[_runs_python(ops.index.to_series()) & uncontended.to_numpy(dtype=bool)]
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
    """Move ``per_task_ms`` of CPU for each of ``op``'s ``tasks`` out of its CPU per event (batches of ``batch_events``),
    at most all of its CPU per batch; ``ops`` is indexed by operator, changed in place."""
    n = max(tasks, 1.0)
    per_task = min(per_task_ms, float(ops.at[op, "cpu_ms_per_event"]) * batch_events / n)
    ops.at[op, "task_cpu_ms"] = per_task
    ops.at[op, "cpu_ms_per_event"] = max(0.0, float(ops.at[op, "cpu_ms_per_event"]) - per_task * n / batch_events)


def _charge_round_trips(
    ops: pd.DataFrame, trips: np.ndarray, rows: pd.DataFrame, skip: list[str], batch_events: float
) -> None:
    """Charge each operator's Python worker round trips (``trips``, see :func:`_python_round_trips`) at PySpark's own
    CPU per task on this machine (the rows'
    ``python_task_cpu_ms``, see ``core.python_task_cpu``), where nothing split its CPU per task from its own runs
    (``skip``); ``ops`` is indexed by operator, changed in place.

    A floor, not a split: the user's code may pay more per task (its own set-up), which stays per event, and
    :func:`fit_task_costs` still splits the whole from two configurations. Measured, replaying two runs of Q11 from
    12 tasks on 2 CPUs (its source stage makes two round trips: a Python scan and a ``mapInArrow``; 62.5 ms each
    here): planned to 6 tasks, 2.70 s predicted for 2.44 s measured with its CPU all per event (+11 %), 2.46 s with
    this floor (+1 %); planned to 5, 4.14 s for 3.25 s (+27 %), 3.61 s with it (+11 %)."""
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


def _split_by_task_records(
    ops: pd.DataFrame, per_task: pd.DataFrame, uncontended: pd.Series, trips: np.ndarray, batch_events: float
) -> list[str]:
    """Move what each JVM stage's tasks pay whatever their records out of its costs per event, where its tasks hold
    uneven records (a shuffle by key); returns the operators split. ``ops`` is indexed by operator, changed in place.

    Batches of one configuration cannot tell a stage's cost per task from its cost per event (the same tasks, about
    the same events), but its tasks can where their records differ: a line through their time (and CPU) against their
    records, by non-negative least squares, puts the fixed part at zero records (measured: Q11's session-window stage,
    2 tasks of 50-470 records each, took 226-326 ms a task at 750 events a batch and 188-282 ms at 1,600, about 114 ms
    of it committing state; charged per event, a plan from 2 s batches to 6.5 s ones over-predicted it by 200 ms).
    What is left after the state commit (``task_wait_ms`` so far) is waiting per task; the fixed CPU, CPU per task.
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
        waited = max(0.0, fixed - float(ops.at[op, "task_cpu_ms"]) - float(ops.at[op, "task_wait_ms"]))
        moved = min(waited * n / batch_events, float(ops.at[op, "wait_ms_per_event"]))
        ops.at[op, "wait_ms_per_event"] -= moved
        ops.at[op, "task_wait_ms"] += moved * batch_events / n
        done.append(op)
    return done


def _python_round_trips(labels: pd.Series, python_source: bool) -> np.ndarray:
    """How many Python worker round trips each operator's tasks make: one per Python plan node in its label (a
    node that repeats counts once: the label lists names), and one for a scan where the stream reads only Python
    data sources (their readers run in the workers, under a scan node of their own name)."""
    nodes = labels.str.replace(r"^j\d+\.d\d+:", "", regex=True).str.replace(r"#\w+$", "", regex=True).str.split("+")
    python = nodes.map(lambda names: sum(bool(re.search(_PYTHON_PLAN_NODES, n)) for n in names))
    scans = nodes.map(lambda names: any(re.search(_SCAN_PLAN_NODES, n) for n in names))
    return (python + (scans & python_source)).to_numpy(dtype=int)


def _reads_python_source(rows: pd.DataFrame) -> bool:
    """Whether every source of the stream is a Python data source (the rows' ``source_kinds``)."""
    if "source_kinds" not in rows:
        return False
    kinds = {kind for value in rows["source_kinds"].dropna() for kind in str(value).split(",") if kind}
    return kinds == {"python"}


_DISTINCT_BATCH_SIZES = 1.3  # a window's largest batch must hold this many times its smallest's events
_MIN_SIZED_BATCHES = 4  # at least two at either end of the sizes


def _split_by_batch_size(
    ops: pd.DataFrame, per_stage: pd.DataFrame, python_batch_ms: pd.Series, shares: pd.Series, skip: list[str]
) -> list[str]:
    """Move each Python operator's CPU per task out of its CPU per event where the window's batches differ in size;
    returns the operators split. ``ops`` is indexed by operator, changed in place.

    Batches of one configuration run the same tasks, so a stage's CPU per batch is ``y = c * e + t * n`` with ``n``
    fixed: where their events ``e`` differ (a backlog's catch-up batches at the cap beside steady ones), a least-squares
    line through the batches separates ``c`` from ``t``, from one configuration and whatever the CPUs' contention
    (measured: Q11's Python scan at 12 tasks on 2 CPUs used 1,020-1,450 ms of CPU per batch of 750 events and
    1,100-1,450 ms per batch of 500: all of it per task, about 100 ms each, as a second configuration confirmed).
    The CPU per batch is the stage's executor CPU plus its share of the Python workers' (``shares``)."""
    done = []
    for op in ops.index[_runs_python(ops.index.to_series())]:
        if op in skip or op not in per_stage.index.get_level_values("operator"):
            continue
        stage = per_stage.loc[op]
        python = python_batch_ms.reindex(stage.index).to_numpy(dtype=float) * float(shares.get(op, 0.0))
        known = ~np.isnan(python)
        events = stage["events"].to_numpy(dtype=float)[known]
        if known.sum() < _MIN_SIZED_BATCHES or events.min() <= 0 or events.max() < _DISTINCT_BATCH_SIZES * events.min():
            continue
        third = (events.max() - events.min()) / 3.0
        if min((events <= events.min() + third).sum(), (events >= events.max() - third).sum()) < 2:
            continue  # one odd batch would set the line alone
        cpu = stage["cpu"].to_numpy(dtype=float)[known] + python[known]
        tasks = stage["tasks"].to_numpy(dtype=float)[known]
        (_, per_task), _ = nnls(np.column_stack([events, tasks]), cpu)
        _charge_per_task(ops, op, per_task, float(tasks.mean()), float(events.mean()))
        done.append(op)
    return done


_DISTINCT_TASK_DENSITY = 1.5  # tasks per event must differ this much between two configurations to separate the costs


def fit_task_costs(current: StreamProfile, earlier: StreamProfile) -> StreamProfile:
    """``current`` with each operator's CPU split into CPU per event and CPU per task, from two configurations.

    Some CPU is paid per task whatever its data: a Python task's worker round trip
    (measured: 80-90 ms per Python plan node per task, warm workers), task
    deserialization, a state store's commit. One configuration cannot tell it from CPU
    per event (every batch has the same tasks and about the same events), so a profile
    charges it per event, and predicts it to grow with a larger batch and to shrink
    when more tasks share it, where it really grows with the tasks (measured: a
    self-join's Python scans used 0.33 s of CPU per batch at 2 tasks and 4.3 s at 24,
    whether a batch had 1,700 or 6,900 events). Two configurations whose tasks per
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


_PYTHON_PLAN_NODES = r"Python|InPandas|InArrow"  # MapInArrow, BatchEvalPython, FlatMapGroupsInPandas, ...
_STATE_PLAN_NODES = r"StateStore|SymmetricHashJoin|Deduplicate|GroupsWithState|TransformWithState"  # keep state
_SCAN_PLAN_NODES = r"Scan"  # MicroBatchScan, Scan json, Scan parquet, KafkaScan...: the stage reads the source
# Spark's file source ("Scan json", "Scan parquet", ...) splits a batch's files by bytes per core: its tasks follow the cores.
_FILE_SCAN_PLAN_NODES = r"(?<![A-Za-z])Scan [A-Za-z]"


def _runs_python(labels: pd.Series) -> np.ndarray:
    """Which operators (by label) run Python: their CPU is the Python workers', partly paid per task."""
    return labels.str.contains(_PYTHON_PLAN_NODES).to_numpy(dtype=bool)


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
    python = _runs_python(ops.index.to_series())
    weights = waiting * python if (waiting * python).sum() > 0 else waiting
    return weights / weights.sum() if weights.sum() > 0 else np.zeros(len(ops))
