"""Normalize Spark listener events into an activity table (SnailTrail's Spark adapter).

Workers: every executor core slot is a worker (``<executor>/<slot>``), and the driver
is the worker ``driver``. The event log does not say which core ran a task, so tasks
are placed on an executor's slots by launch time (first free slot, like the scheduler).

Per task attempt, on its worker's timeline, in order (SnailTrail's sequence):

==================  ==================================================================
activity            from the task's metrics
==================  ==================================================================
``scheduling``      scheduler delay: the control message from the driver arriving
``deserialization`` executor deserialize time
``buffer``          shuffle fetch wait time (waiting for upstream data)
``processing``      run time minus fetch wait and shuffle write
``serialization``   shuffle write time, then result serialization time
``data``            getting-result time (the result message to the driver)
==================  ==================================================================

plus communication rows (``src_worker`` -> ``dst_worker``): a ``control`` message from
the driver at launch, a ``data`` message to the driver at the end, and ``data``
messages from each task of a parent stage to each task of its child stage (shuffles).

Logical operators are stable across micro-batches: a stage is named by its place in
the query's plan (the Spark plan nodes it runs, and its depth below the job's final
stage), not by its id, which grows every batch.

Schema of the table (:data:`ACTIVITY_COLUMNS`): ``app_id``, ``query_id``, ``batch_id``
(-1 outside streaming), ``job_id``, ``stage_id``, ``stage_attempt``, ``operator``,
``task_id`` (-1 for stage-level messages), ``attempt``, ``status`` (success, failed,
killed), ``speculative``, ``worker``, ``src_worker``, ``dst_worker`` (set for messages),
``activity``, ``start_ms``, ``end_ms`` (epoch milliseconds, floats), ``records_in``,
``records_out``, ``bytes_in``, ``bytes_out``.

What the normalizer does not use is counted in ``skipped`` by reason, never dropped
silently: event types it does not need, tasks of stages it never saw submitted, tasks
without metrics (older Spark versions), and so on.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .eventlog import gc_paused

__all__ = ["ACTIVITY_COLUMNS", "ACTIVITY_TYPES", "COMMUNICATION_TYPES", "TraceNormalizer"]

ACTIVITY_TYPES = ("scheduling", "deserialization", "buffer", "processing", "serialization", "data", "control", "waiting", "unknown")
COMMUNICATION_TYPES = ("data", "control")
ACTIVITY_COLUMNS = [
    "app_id", "query_id", "batch_id", "job_id", "stage_id", "stage_attempt", "operator", "task_id", "attempt",
    "status", "speculative", "worker", "src_worker", "dst_worker", "activity", "start_ms", "end_ms",
    "records_in", "records_out", "bytes_in", "bytes_out",
]
DRIVER = "driver"
STATE_STAGES_KEPT = 500  # stages remembered across incremental reads (parents of new stages)
USED_EVENTS = frozenset({
    "SparkListenerApplicationStart", "SparkListenerExecutorAdded", "SparkListenerExecutorRemoved",
    "SparkListenerJobStart", "SparkListenerStageSubmitted", "SparkListenerStageCompleted", "SparkListenerTaskEnd",
})

def _scope_name(rdd: dict[str, Any]) -> str | None:
    scope = rdd.get("Scope")
    if not scope:
        return None
    try:
        return json.loads(scope).get("name")
    except (json.JSONDecodeError, AttributeError):
        return None


@dataclass
class _Stage:
    stage_id: int
    job_id: int
    query_id: str | None
    batch_id: int
    operator: str
    parents: list[int]


@dataclass
class TraceNormalizer:
    """Turns events into activity rows; keeps what later events need (executors, jobs, stages).

    Feed events in log order with :meth:`add`, possibly over several incremental reads,
    and take the rows so far with :meth:`table`. Its state is JSON-serializable
    (:meth:`state` / :meth:`from_state`) so an incremental reader can resume.
    """

    app_id: str | None = None
    executor_cores: dict[str, int] = field(default_factory=dict)
    stages: dict[int, _Stage] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)
    _job_props: dict[int, tuple[str | None, int]] = field(default_factory=dict)
    _job_ordinal: dict[int, int] = field(default_factory=dict)
    _batch_jobs: dict[tuple[str | None, int], int] = field(default_factory=dict)
    _slots_free_at: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    _stage_task_ends: dict[int, list[tuple[str, float]]] = field(default_factory=lambda: defaultdict(list))
    _rows: list[tuple] = field(default_factory=list)

    # -- events --------------------------------------------------------------------------------

    def add(self, events: Iterable[dict[str, Any]]) -> None:
        """Normalize ``events`` (dicts as in the event log), in log order."""
        with gc_paused():
            self._add(events)

    def _add(self, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            kind = event.get("Event")
            if kind not in USED_EVENTS:
                self.skipped[f"event not used: {kind}"] += 1
                continue
            getattr(self, "_on_" + kind.removeprefix("SparkListener"))(event)

    def _on_ApplicationStart(self, event: dict[str, Any]) -> None:
        self.app_id = event.get("App ID") or self.app_id

    def _on_ExecutorAdded(self, event: dict[str, Any]) -> None:
        info = event.get("Executor Info") or {}
        self.executor_cores[str(event["Executor ID"])] = int(info.get("Total Cores") or 1)

    def _on_ExecutorRemoved(self, event: dict[str, Any]) -> None:
        """Removed executors keep their slots in the table: their tasks stay on their timelines."""

    def _on_JobStart(self, event: dict[str, Any]) -> None:
        job_id = int(event["Job ID"])
        props = event.get("Properties") or {}
        query_id = props.get("sql.streaming.queryId")
        batch_id = int(props.get("streaming.sql.batchId", -1))
        self._job_props[job_id] = (query_id, batch_id)
        key = (query_id, batch_id)
        self._job_ordinal[job_id] = self._batch_jobs.get(key, 0)
        self._batch_jobs[key] = self._job_ordinal[job_id] + 1
        infos = {int(s["Stage ID"]): s for s in event.get("Stage Infos") or []}
        for stage_id, info in infos.items():
            self._register_stage(info, job_id, infos)

    def _register_stage(self, info: dict[str, Any], job_id: int, job_stages: dict[int, dict[str, Any]]) -> None:
        stage_id = int(info["Stage ID"])
        if stage_id in self.stages:
            return
        query_id, batch_id = self._job_props.get(job_id, (None, -1))
        parents = [int(p) for p in info.get("Parent IDs") or []]
        self.stages[stage_id] = _Stage(
            stage_id, job_id, query_id, batch_id, self._operator_name(info, job_id, job_stages), parents
        )

    def _operator_name(self, info: dict[str, Any], job_id: int, job_stages: dict[int, dict[str, Any]]) -> str:
        """``j<job ordinal>.d<depth below the final stage>:<plan nodes>#<hash>``: the same every batch."""
        final = max(job_stages) if job_stages else int(info["Stage ID"])
        depth, frontier = 0, {final}
        target = int(info["Stage ID"])
        while target not in frontier and frontier:
            frontier = {int(p) for s in frontier for p in (job_stages.get(s, {}).get("Parent IDs") or [])}
            depth += 1
        names = sorted({n for rdd in info.get("RDD Info") or [] if (n := _scope_name(rdd))})
        plan_nodes = [n for n in names if not n.startswith("WholeStageCodegen")] or names or ["stage"]
        digest = hashlib.sha1("|".join(names).encode()).hexdigest()[:6]
        return f"j{self._job_ordinal.get(job_id, 0)}.d{depth}:{'+'.join(plan_nodes)}#{digest}"

    def _on_StageSubmitted(self, event: dict[str, Any]) -> None:
        info = event.get("Stage Info") or {}
        if int(info.get("Stage ID", -1)) not in self.stages:
            # A stage submitted outside any known job (older logs omit Stage Infos): name it alone.
            job_id = int((event.get("Properties") or {}).get("spark.job.id", -1))
            self._register_stage(info, job_id, {int(info["Stage ID"]): info})

    def _on_StageCompleted(self, event: dict[str, Any]) -> None:
        """Stage completion carries no task timing; stage barriers are derived from the tasks."""

    def _on_TaskEnd(self, event: dict[str, Any]) -> None:
        stage = self.stages.get(int(event.get("Stage ID", -1)))
        if stage is None:
            self.skipped["task of a stage never submitted"] += 1
            return
        info = event.get("Task Info") or {}
        metrics = event.get("Task Metrics")
        if metrics is None:
            self.skipped["task without metrics"] += 1
            metrics = {}
        reason = (event.get("Task End Reason") or {}).get("Reason", "Success")
        status = "success" if reason == "Success" else ("killed" if info.get("Killed") or reason == "TaskKilled" else "failed")
        launch, finish = float(info.get("Launch Time", 0)), float(info.get("Finish Time", 0))
        if finish < launch or launch <= 0:
            self.skipped["task with invalid launch/finish time"] += 1
            return
        executor = str(info.get("Executor ID", "unknown"))
        worker = self._place(executor, launch, finish)
        read = metrics.get("Shuffle Read Metrics") or {}
        write = metrics.get("Shuffle Write Metrics") or {}
        inputs = metrics.get("Input Metrics") or {}
        outputs = metrics.get("Output Metrics") or {}
        run = float(metrics.get("Executor Run Time", 0))
        deserialize = float(metrics.get("Executor Deserialize Time", 0))
        result_ser = float(metrics.get("Result Serialization Time", 0))
        getting = float(info.get("Getting Result Time", 0) or 0)
        getting = max(0.0, finish - getting) if getting > 0 else 0.0  # Spark stores the time it started
        fetch_wait = float(read.get("Fetch Wait Time", 0))
        shuffle_write = float(write.get("Shuffle Write Time", 0)) / 1e6  # nanoseconds
        scheduling = max(0.0, (finish - launch) - run - deserialize - result_ser - getting)
        records_in = int(read.get("Total Records Read", 0)) + int(inputs.get("Records Read", 0))
        bytes_in = int(read.get("Remote Bytes Read", 0)) + int(read.get("Local Bytes Read", 0)) + int(inputs.get("Bytes Read", 0))
        records_out = int(write.get("Shuffle Records Written", 0)) + int(outputs.get("Records Written", 0))
        bytes_out = int(write.get("Shuffle Bytes Written", 0)) + int(outputs.get("Bytes Written", 0))
        common = (
            self.app_id, stage.query_id, stage.batch_id, stage.job_id, stage.stage_id,
            int(event.get("Stage Attempt ID", 0)), stage.operator, int(info.get("Task ID", -1)),
            int(info.get("Attempt", 0)), status, bool(info.get("Speculative", False)),
        )
        cursor = launch
        processing = max(0.0, run - fetch_wait - shuffle_write)
        steps = [
            ("scheduling", scheduling), ("deserialization", deserialize), ("buffer", fetch_wait),
            ("processing", processing), ("serialization", shuffle_write + result_ser), ("data", getting),
        ]
        for activity, duration in steps:
            end = min(finish, cursor + duration)
            if end > cursor:
                is_processing = activity == "processing"
                self._rows.append((*common, worker, None, None, activity, cursor, end,
                                   records_in if is_processing else 0, records_out if is_processing else 0,
                                   bytes_in if is_processing else 0, bytes_out if is_processing else 0))
            cursor = end
        if cursor < finish:
            self._rows.append((*common, worker, None, None, "unknown", cursor, finish, 0, 0, 0, 0))
        # Communication: control from the driver, result to the driver, shuffle input from parent stages.
        self._rows.append((*common, DRIVER, DRIVER, worker, "control", launch, launch + scheduling, 0, 0, 0, 0))
        self._rows.append((*common, worker, worker, DRIVER, "data", finish - getting if getting else finish, finish, 0, 0, 0, 0))
        if status == "success":
            # Shuffle input: one message per parent-stage task, in flight while this task
            # fetches (from when it starts fetching, or the sender finished if later).
            fetch_start = launch + scheduling + deserialize
            fetch_end = fetch_start + fetch_wait
            for parent in stage.parents:
                for src_worker, src_end in self._stage_task_ends.get(parent, []):
                    if src_end <= fetch_end:
                        self._rows.append((*common, src_worker, src_worker, worker, "data",
                                           max(src_end, fetch_start), fetch_end, 0, 0, 0, 0))
            self._stage_task_ends[stage.stage_id].append((worker, finish))
        if status != "success":
            self.skipped[f"{status} task attempt (kept, marked {status})"] += 1

    def _place(self, executor: str, launch: float, finish: float) -> str:
        """Put a task on the first slot of its executor that is free at launch.

        Finish times are stamped by the driver, a little after the executor freed the
        core, so a task can launch "before" its slot's previous task finished: then the
        slot freed earliest is used (counted). Slots beyond the executor's cores are
        added only when its core count is unknown.
        """
        slots = self._slots_free_at[executor]
        for index, free_at in enumerate(slots):
            if free_at <= launch:
                slots[index] = finish
                return f"{executor}/{index}"
        cores = self.executor_cores.get(executor)
        if cores is not None and len(slots) >= cores:
            index = int(min(range(len(slots)), key=slots.__getitem__))
            self.skipped["task launched before its slot's previous task was reported finished"] += 1
            slots[index] = max(slots[index], finish)
            return f"{executor}/{index}"
        slots.append(finish)
        return f"{executor}/{len(slots) - 1}"

    # -- state -------------------------------------------------------------------------------

    def state(self, keep_stages: int = STATE_STAGES_KEPT) -> dict[str, Any]:
        """JSON-able state to resume from (rows excluded; only the newest ``keep_stages`` stages kept)."""
        recent = sorted(self.stages)[-keep_stages:]
        recent_jobs = {self.stages[s].job_id for s in recent}
        return {
            "version": 1,
            "app_id": self.app_id,
            "executor_cores": self.executor_cores,
            "stages": {str(s): vars(self.stages[s]) for s in recent},
            "skipped": dict(self.skipped),
            "job_props": {str(j): list(v) for j, v in self._job_props.items() if j in recent_jobs},
            "job_ordinal": {str(j): o for j, o in self._job_ordinal.items() if j in recent_jobs},
            "batch_jobs": [[q, b, n] for (q, b), n in list(self._batch_jobs.items())[-keep_stages:]],
            "slots_free_at": dict(self._slots_free_at),
            "stage_task_ends": {str(s): self._stage_task_ends[s] for s in recent if s in self._stage_task_ends},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "TraceNormalizer":
        """A normalizer that continues where the one that wrote ``state`` stopped."""
        if state.get("version") != 1:
            raise ValueError(f"unsupported normalizer state version {state.get('version')!r}; re-ingest the log")
        normalizer = cls(app_id=state["app_id"], executor_cores=dict(state["executor_cores"]))
        normalizer.stages = {int(s): _Stage(**v) for s, v in state["stages"].items()}
        normalizer.skipped = Counter(state["skipped"])
        normalizer._job_props = {int(j): (v[0], int(v[1])) for j, v in state["job_props"].items()}
        normalizer._job_ordinal = {int(j): int(o) for j, o in state["job_ordinal"].items()}
        normalizer._batch_jobs = {(q, int(b)): int(n) for q, b, n in state["batch_jobs"]}
        normalizer._slots_free_at.update({k: list(v) for k, v in state["slots_free_at"].items()})
        normalizer._stage_task_ends.update({int(s): [tuple(x) for x in v] for s, v in state["stage_task_ends"].items()})
        return normalizer

    def take_rows(self) -> pd.DataFrame:
        """The rows normalized since the last call (and forget them): for incremental ingestion."""
        frame = self.table()
        self._rows = []
        return frame

    # -- output --------------------------------------------------------------------------------

    def table(self) -> pd.DataFrame:
        """Every activity normalized so far (see module docstring for the schema)."""
        with gc_paused():
            frame = pd.DataFrame.from_records(self._rows, columns=ACTIVITY_COLUMNS)
        return frame.astype(
            {"batch_id": "int64", "job_id": "int64", "stage_id": "int64", "stage_attempt": "int64", "task_id": "int64",
             "attempt": "int64", "start_ms": "float64", "end_ms": "float64", "records_in": "int64",
             "records_out": "int64", "bytes_in": "int64", "bytes_out": "int64", "speculative": "bool"}
        )
