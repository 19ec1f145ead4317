"""What each logical operator of a stream costs, and what the stream's batches would take under other knobs.

A :class:`StreamProfile` holds, per logical operator (a stage stable across batches), DS2's useful time per source
event split into CPU and waiting, its tasks' fixed costs, and the batch's coordination; its methods predict a batch's
duration and the stream's capacity for any knobs, as a roofline over the CPUs and the tasks (with a band where the
measurements cannot tell two readings apart). :mod:`dagster_reconf.core.scaling.profiling` measures one from a
window's traces and progress. The model, term by term: ``docs/profile.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

from dagster_reconf.core.errors import ReconfError
from dagster_reconf.core.scaling.scaling_plan import Knobs

__all__ = [
    "FILE_SCAN_PLAN_NODES",
    "OPERATOR_COLUMNS",
    "PYTHON_PLAN_NODES",
    "SCAN_PLAN_NODES",
    "STATE_PLAN_NODES",
    "USEFUL_ACTIVITIES",
    "ProfileError",
    "StreamProfile",
    "runs_python",
    "wave_parallelism",
]


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
    "record_skew",
    "task_cpu_ms",
    "task_wait_ms",
    "commit_ms",
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
        for name in ("queue_ms_per_event", "slowest_queue_ms", "commit_ms"):  # 0 in a profile built without them
            numbers[name] = ops[name].to_numpy(dtype=np.float64) if name in ops else np.zeros(len(ops))
        numbers["record_skew"] = (
            ops["record_skew"].to_numpy(dtype=np.float64) if "record_skew" in ops else np.ones(len(ops))
        )
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
                np.where(col["split"], self._file_scan_tasks(knobs), col["tasks"]),
            ),
        )

    def _file_scan_tasks(self, knobs: Knobs) -> np.ndarray:
        """Tasks a file scan runs per batch under ``knobs``, as Spark's file source splits a batch's files.

        Spark packs a batch's files into partitions of at most ``max(openCostInBytes, bytes per core)`` (4 MB at
        least), each file costing its size plus the open cost: files smaller than that get a task each up to the
        cores, and the cores' worth of bytes per task past them. So a scan measured with fewer tasks than cores was
        bound by its files, and more cores add no task; one measured with the cores' worth grows with the cores, up
        to the batch's files where ``knobs`` caps them (``maxFilesPerTrigger``: small files, a task each at most).
        A scan measured at its cap (a task per file, as many as the cap admits) gets a task per file of a raised cap.
        """
        measured, cores = self._columns["tasks"], float(self.knobs.cores)
        by_cores = np.maximum(measured * knobs.cores / cores, 1.0)
        capped = np.minimum(by_cores, float(knobs.max_per_trigger)) if knobs.max_per_trigger else by_cores
        files = measured
        was, now = self.knobs.max_per_trigger, knobs.max_per_trigger
        if was and now and now > was:  # the cap bound the files a batch read: a raised one reads more
            files = np.where(measured >= was, measured * now / was, measured)
        return np.where(measured < cores, np.minimum(files, float(knobs.cores)), np.maximum(capped, 1.0))

    def parallelism(self, knobs: Knobs) -> np.ndarray:
        """Tasks of each operator that can run at once under ``knobs``."""
        return np.minimum(self.tasks(knobs), knobs.cores)

    def stage_lines(
        self, knobs: Knobs, *, queued_set_ups: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each stage's time as two lines in the batch's events ``e``: its CPU over the CPUs (``a*e + b``) and its
        tasks' own time over the tasks at once (``a2*e + b2``); the stage takes the longer (see module docstring).
        ``queued_set_ups``: the tasks' side pays their set-ups over the CPUs where ``knobs`` brings contention
        that the stage was measured without. Tasks at once end with the one holding the most records, so with more
        than one at a time the tasks' side adds that task's excess over the mean (``record_skew`` - 1 times a task's
        mean work per event) once, in the last wave; one at a time, they add up."""
        col = self._columns
        n, q = self.tasks(knobs), self.parallelism(knobs)
        m = np.minimum(q, self.cpus)
        waves = wave_parallelism(n, q)
        per_task = n * col["task_cpu_ms"]
        cpu = col["cpu_ms_per_event"]
        again = self._queue_again(q)
        wait = col["wait_ms_per_event"] + np.where(again, col["queue_ms_per_event"], 0.0)
        slowest = np.where(again, col["slowest_queue_ms"], 0.0)
        queued = (q > m) & ~self._measured_shared if queued_set_ups else False
        tasks_side = np.where(queued, per_task / m, per_task / waves) + n * col["task_wait_ms"] / waves
        tasks_side = tasks_side + n * col["commit_ms"] * self._commit_contention(q) / waves
        hot = np.where(q > 1, (col["record_skew"] - 1.0) * (cpu + wait) / np.maximum(n, 1.0), 0.0)
        return cpu / m, per_task / m + slowest, (cpu + wait) / waves + hot, tasks_side + slowest

    def _commit_contention(self, parallelism: np.ndarray) -> np.ndarray:
        """How much longer each state store commit takes with ``parallelism`` tasks of its stage at once than as
        measured. Commits on one machine (local mode: finite ``cpus``) contend as if one after another: ``q`` at once
        take ``(q + 1) / 2`` times one alone each, on average. On a cluster each executor commits to its own disks, and
        how many of a stage's tasks share one is unknown: as measured."""
        if not np.isfinite(self.cpus):
            return np.ones_like(parallelism, dtype=np.float64)
        return (np.maximum(parallelism, 1.0) + 1.0) / (np.maximum(self._measured_parallelism, 1.0) + 1.0)

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
        """Wall-clock milliseconds each stage adds per source event under ``knobs``: ``max(c / m, (c + s) / w)``, ``w``
        the tasks at once counting waves (:func:`wave_parallelism`)."""
        a, _, a2, _ = self.stage_lines(knobs)
        return np.maximum(a, a2)

    def stage_fixed_ms(self, knobs: Knobs) -> np.ndarray:
        """What each stage costs per batch whatever the batch's size: ``o + max(n * t / m, n * (t + w + k) / q)``.

        ``o`` is the stage's measured overhead, ``t`` the CPU each of its ``n`` tasks
        spends whatever its data (see :func:`fit_task_costs`), spread over the ``m``
        tasks computing at once (no more than the CPUs), ``w`` what each task waits whatever
        its data and ``k`` its state store's commit (see :meth:`_commit_contention`), over the ``q`` tasks at once.
        """
        _, b, _, b2 = self.stage_lines(knobs)
        return self._columns["overhead_ms"] + np.maximum(b, b2)

    def fixed_ms_for(self, knobs: Knobs) -> float:
        """What a batch costs under ``knobs`` whatever its size: coordination plus every stage's fixed costs."""
        return self.coordination_ms + float(self.stage_fixed_ms(knobs).sum())

    @cached_property
    def base_ms(self) -> float:
        """What every batch pays outside its stages' lines: coordination and the stages' measured overheads."""
        return self.coordination_ms + float(self._columns["overhead_ms"].sum())

    def batch_ms_for(self, events: float, knobs: Knobs, *, queued_set_ups: bool = True) -> float:
        """Predicted duration of a batch of ``events`` under ``knobs`` (stages one after another on shared cores);
        ``queued_set_ups=False``: the plain roofline, where tasks' set-ups overlap other tasks' waits."""
        a, b, a2, b2 = self.stage_lines(knobs, queued_set_ups=queued_set_ups)
        return self.base_ms + float(np.maximum(a * events + b, a2 * events + b2).sum())

    def events_within(self, knobs: Knobs, budget_ms: float) -> float:
        """The largest batch (events) that ends within ``budget_ms`` under ``knobs``; inf where events cost nothing.

        The batch's duration is a sum of maxima of lines in ``e``: convex and piecewise
        linear, so it is evaluated at its breakpoints and interpolated on the segment
        where it crosses the budget.
        """
        return self._events_within(self.stage_lines(knobs), budget_ms)

    def _events_within(self, lines: tuple[np.ndarray, ...], budget_ms: float) -> float:
        a, b, a2, b2 = lines
        base = self.base_ms
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
        a, b, _, _ = waiting.stage_lines(self.knobs)
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
        unknown = runs_python(ops["operator"]) & ~ops["operator"].isin(self.task_costs_fitted).to_numpy()
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
        contention cannot tell.
        """
        a, b, a2, b2 = self.stage_lines(knobs, queued_set_ups=False)  # the sum counts the set-ups' queueing once
        q = self.parallelism(knobs)
        b = b - np.where(
            self._queue_again(q), self._columns["slowest_queue_ms"], 0.0
        )  # that queueing once: tasks' side
        shared = q > self.cpus
        return self.base_ms + float((a2 * events + b2 + np.where(shared, a * events + b, 0.0)).sum())

    def batch_ms_band(self, events: float, knobs: Knobs) -> tuple[float, float]:
        """The shortest and longest a batch of ``events`` may take under ``knobs`` by what one configuration cannot
        tell:
        tasks that shared CPUs waiting or queueing (:meth:`queued_reading`), Python stages' CPU per event or per task
        (:meth:`per_task_reading`), tasks sharing CPUs overlapping their waits with others' CPU or not
        (:meth:`contended_batch_ms_for`), their set-ups queueing before all waits or overlapping some.
        :meth:`batch_ms_for` lies within."""
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
        lines = self.stage_lines(knobs)
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


PYTHON_PLAN_NODES = r"Python|InPandas|InArrow"  # MapInArrow, BatchEvalPython, FlatMapGroupsInPandas, ...
STATE_PLAN_NODES = r"StateStore|SymmetricHashJoin|Deduplicate|GroupsWithState|TransformWithState"  # keep state
SCAN_PLAN_NODES = r"Scan"  # MicroBatchScan, Scan json, Scan parquet, KafkaScan...: the stage reads the source
# Spark's file source ("Scan json", "Scan parquet", ...) splits a batch's files by bytes per core: its tasks follow the
# cores.
FILE_SCAN_PLAN_NODES = r"(?<![A-Za-z])Scan [A-Za-z]"


def wave_parallelism(tasks: np.ndarray, at_once: np.ndarray) -> np.ndarray:
    """How many tasks' worth ``tasks`` equal tasks, ``at_once`` at a time, progress at once: they run in
    ``ceil(tasks / at_once)`` waves, so as fast as ``tasks / ceil(tasks / at_once)`` slots without a gap. 8 state
    partitions on 3 cores run in 3 waves, as fast as 2.67 cores; on 5 to 7 cores no faster than on 4."""
    at_once = np.maximum(at_once, 1.0)
    return np.where(tasks > at_once, tasks / np.ceil(tasks / at_once - 1e-9), at_once)


def runs_python(labels: pd.Series) -> np.ndarray:
    """Which operators (by label) run Python: their CPU is the Python workers', partly paid per task."""
    return labels.str.contains(PYTHON_PLAN_NODES).to_numpy(dtype=bool)
