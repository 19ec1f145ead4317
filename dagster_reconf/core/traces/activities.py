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
``records_out``, ``bytes_in``, ``bytes_out`` and ``cpu_ms`` (the task's executor CPU time,
deserialization included; like the traffic figures, only on its ``processing`` row).

What the normalizer does not use is counted in ``skipped`` by reason, never dropped
silently: event types it does not need, tasks of stages it never saw submitted, tasks
without metrics (older Spark versions), and so on. Some unused types are unused by
design: stage completions carry no task timing (barriers come from the tasks), and a
removed executor's tasks simply stay on its slots' timelines.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from dagster_reconf.core.traces.activity_rows import ActivityRows, task_columns
from dagster_reconf.core.traces.event_schema import (
    ACTIVITY_COLUMNS,
    DRIVER,
    STEP_ACTIVITIES,
    TASK_END_SCHEMA,
    USED_EVENTS,
)
from dagster_reconf.core.traces.eventlog import gc_paused
from dagster_reconf.core.traces.placement import stage_depths
from dagster_reconf.core.traces.worker_slots import ShuffleSenders, WorkerSlots

__all__ = ["TraceNormalizer"]

_STATUSES = ("success", "failed", "killed")
_DTYPES = {
    "batch_id": "int64",
    "job_id": "int64",
    "stage_id": "int64",
    "stage_attempt": "int64",
    "task_id": "int64",
    "attempt": "int64",
    "start_ms": "float64",
    "end_ms": "float64",
    "records_in": "int64",
    "records_out": "int64",
    "bytes_in": "int64",
    "bytes_out": "int64",
    "cpu_ms": "float64",
    "speculative": "bool",
}
_TASK_PARSE = pj.ParseOptions(explicit_schema=TASK_END_SCHEMA, unexpected_field_behavior="ignore")
_TASK_READ = pj.ReadOptions(block_size=1 << 24)
STATE_STAGES_KEPT = 500  # stages remembered across incremental reads (parents of new stages)


def _scope_name(scope: str | None) -> str | None:
    if not scope:
        return None
    try:
        return orjson.loads(scope).get("name")
    except (orjson.JSONDecodeError, AttributeError):
        return None


@functools.lru_cache(maxsize=4096)
def _plan_label(scopes: tuple[str | None, ...]) -> str:
    """``<plan nodes>#<hash>`` of a stage's RDD scopes; cached, since every batch repeats the same stages."""
    names = sorted({n for scope in scopes if (n := _scope_name(scope))})
    plan_nodes = [n for n in names if not n.startswith("WholeStageCodegen")] or names or ["stage"]
    digest = hashlib.sha1("|".join(names).encode()).hexdigest()[:6]
    return f"{'+'.join(plan_nodes)}#{digest}"


def _operator_name(job_ordinal: int, depth: int, label: str) -> str:
    """``j<job ordinal>.d<depth below the job's final stage>:<plan nodes>#<hash>``: the same every batch."""
    return f"j{job_ordinal}.d{depth}:{label}"


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
    _slots: WorkerSlots = field(default_factory=WorkerSlots)
    _senders: ShuffleSenders = field(default_factory=ShuffleSenders)
    _frames: list[pa.Table] = field(default_factory=list)
    _pending_tasks: list[dict[str, Any]] = field(default_factory=list)

    # -- events --------------------------------------------------------------------------------

    def add(self, events: Iterable[dict[str, Any]]) -> None:
        """Normalize ``events`` (dicts as in the event log), in log order."""
        with gc_paused():
            self._add(events)
            self._flush_pending()

    def _add(self, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            kind = event.get("Event")
            if kind not in USED_EVENTS:
                self.skipped[f"event not used: {kind}"] += 1
                continue
            try:
                getattr(self, "_on_" + kind.removeprefix("SparkListener"))(event)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):  # JSON, but not what Spark writes
                self.skipped[f"malformed event: {kind}"] += 1

    def _on_ApplicationStart(self, event: dict[str, Any]) -> None:
        self.app_id = event.get("App ID") or self.app_id

    def _on_ExecutorAdded(self, event: dict[str, Any]) -> None:
        info = event.get("Executor Info") or {}
        self.executor_cores[str(event["Executor ID"])] = int(info.get("Total Cores") or 1)

    def _on_JobStart(self, event: dict[str, Any]) -> None:
        job_id = int(event["Job ID"])
        props = event.get("Properties") or {}
        query_id = props.get("sql.streaming.queryId")
        batch_id = int(props.get("streaming.sql.batchId") or -1)
        self._note_job(job_id, query_id, batch_id)
        infos = {int(s["Stage ID"]): s for s in event.get("Stage Infos") or []}
        for info in infos.values():
            self._register_stage(info, job_id, infos)

    def _note_job(self, job_id: int, query_id: str | None, batch_id: int) -> None:
        """Remember a job's query and batch, and its ordinal among the batch's jobs (what names its stages)."""
        self._job_props[job_id] = (query_id, batch_id)
        key = (query_id, batch_id)
        self._job_ordinal[job_id] = self._batch_jobs.get(key, 0)
        self._batch_jobs[key] = self._job_ordinal[job_id] + 1

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
        label = _plan_label(tuple(r.get("Scope") for r in info.get("RDD Info") or []))
        return _operator_name(self._job_ordinal.get(job_id, 0), depth, label)

    def _on_StageSubmitted(self, event: dict[str, Any]) -> None:
        info = event.get("Stage Info") or {}
        if info.get("Stage ID") is None:
            raise KeyError("Stage ID")  # counted as a malformed event
        if int(info["Stage ID"]) not in self.stages:
            # A stage submitted outside any known job (older logs omit Stage Infos): name it alone.
            job_id = int((event.get("Properties") or {}).get("spark.job.id") or -1)
            self._register_stage(info, job_id, {int(info["Stage ID"]): info})

    def _on_TaskEnd(self, event: dict[str, Any]) -> None:
        self._pending_tasks.append(event)

    def add_task_lines(self, lines: list[bytes]) -> None:
        """Normalize raw ``SparkListenerTaskEnd`` lines (the fast path: parsed by Arrow, derived in numpy).

        A line Arrow refuses (cut, bit-flipped, not UTF-8, a field of another type) is found by
        parsing halves of the lines again, and counted as ``corrupt_line``; the others are kept.
        """
        tables = self._task_tables(lines)
        with gc_paused():
            for table in tables:
                self._add_tasks(table)

    def _task_tables(self, lines: list[bytes]) -> list[pa.Table]:
        if not lines:
            return []
        try:
            table = pj.read_json(io.BytesIO(b"\n".join(lines)), parse_options=_TASK_PARSE, read_options=_TASK_READ)
            table.validate(full=True)  # Arrow's JSON reader lets invalid UTF-8 through inside strings
            return [table]
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            if len(lines) == 1:
                self.skipped["corrupt_line"] += 1
                return []
            half = len(lines) // 2
            return self._task_tables(lines[:half]) + self._task_tables(lines[half:])

    def add_table(self, table: pa.Table) -> None:
        """Normalize events parsed by Arrow with :data:`EVENT_SCHEMA` (the fast path for whole logs)."""
        kinds = table.column("Event")
        is_task = pc.equal(kinds, "SparkListenerTaskEnd")
        is_job = pc.equal(kinds, "SparkListenerJobStart")
        others = table.filter(pc.invert(pc.or_(is_task, is_job))).drop_columns(
            [n for n in TASK_END_SCHEMA.names if n != "Event"]
        )
        with gc_paused():
            # Jobs first: in a log a job's start comes before its stages' submissions and tasks.
            self._add_jobs(table.filter(is_job).select(["Job ID", "Stage Infos", "Properties"]))
            self._add(others.to_pylist())  # absent fields come as None: the handlers treat both alike
            self._add_tasks(table.select(TASK_END_SCHEMA.names), is_task.to_numpy(zero_copy_only=False))

    def _add_jobs(self, jobs: pa.Table) -> None:
        """``SparkListenerJobStart`` rows, in log order, as :meth:`_on_JobStart` handles them one by one.

        Columnar: a stage's plan label is computed once per distinct list of RDD scopes,
        and its depth below its job's final stage by relaxing parent edges over all jobs
        at once (a job's stages are its final stage's ancestors). A job with a stage that
        is not its final stage's ancestor goes through :meth:`_on_JobStart`.
        """
        malformed = jobs.column("Job ID").null_count
        if malformed:  # a job start without its id (a damaged line that is still JSON): its stages go unregistered
            self.skipped["malformed event: SparkListenerJobStart"] += malformed
            jobs = jobs.filter(pc.is_valid(jobs.column("Job ID")))
        if jobs.num_rows == 0:
            return
        job_ids = jobs.column("Job ID").to_numpy(zero_copy_only=False).astype(np.int64)
        props = jobs.column("Properties").combine_chunks()
        queries = pc.struct_field(props, "sql.streaming.queryId").to_pylist()  # null where Properties is
        batches = [int(b or -1) for b in pc.struct_field(props, "streaming.sql.batchId").to_pylist()]
        for job_id, query_id, batch_id in zip(job_ids.tolist(), queries, batches, strict=True):
            self._note_job(job_id, query_id, batch_id)

        infos = jobs.column("Stage Infos").combine_chunks()
        flat = pc.list_flatten(infos)
        if len(flat) == 0:
            return
        job_of = pc.list_parent_indices(infos).to_numpy()
        stage_col, parents, rdds = flat.flatten()  # _STAGE_INFO's fields, offsets and nulls applied
        stage_ids = stage_col.to_numpy(zero_copy_only=False).astype(np.int64)
        scopes = pa.ListArray.from_arrays(rdds.offsets, pc.fill_null(pc.struct_field(rdds.values, "Scope"), ""))
        keys = pc.fill_null(pc.binary_join(scopes, "\x1f"), "").dictionary_encode()
        labels = np.array(
            [_plan_label(tuple(k.split("\x1f")) if k else ()) for k in keys.dictionary.to_pylist()], dtype=object
        )
        depth, unreached = stage_depths(
            job_of,
            stage_ids,
            pc.list_parent_indices(parents).to_numpy(),
            pc.list_flatten(parents).to_numpy(zero_copy_only=False).astype(np.int64),
        )

        first = np.unique(stage_ids, return_index=True)[1]  # the first job that names a stage registers it
        first = first[~np.isin(stage_ids[first], np.fromiter(self.stages, dtype=np.int64, count=len(self.stages)))]
        parent_lists = parents.to_pylist()
        label_of = labels[keys.indices.to_numpy()]
        fallback = set(job_of[unreached].tolist())
        for row in np.sort(first).tolist():
            job = int(job_of[row])
            job_id = int(job_ids[job])
            if job in fallback:
                continue
            query_id, batch_id = self._job_props[job_id]
            name = _operator_name(self._job_ordinal[job_id], int(depth[row]), label_of[row])
            self.stages[int(stage_ids[row])] = _Stage(
                int(stage_ids[row]), job_id, query_id, batch_id, name, [int(p) for p in parent_lists[row] or []]
            )
        for job in sorted(fallback):
            event = jobs.slice(job, 1).to_pylist()[0]
            infos_of_job = {int(i["Stage ID"]): i for i in event.get("Stage Infos") or []}
            for info in infos_of_job.values():
                self._register_stage(info, int(job_ids[job]), infos_of_job)

    def _flush_pending(self) -> None:
        if self._pending_tasks:
            table = pa.Table.from_pylist(self._pending_tasks, schema=TASK_END_SCHEMA)
            self._pending_tasks = []
            self._add_tasks(table)

    def _add_tasks(self, table: pa.Table, rows: np.ndarray | None = None) -> None:
        """Activities and messages of a batch of task ends (``rows`` of ``table``), vectorized (see module
        docstring)."""
        if table.num_rows == 0:
            return
        col = task_columns(table)
        if rows is not None:
            col = {k: v[rows] for k, v in col.items()}
        stage_ids = col["Stage ID"]
        known = np.isin(stage_ids, np.fromiter(self.stages, dtype=np.int64, count=len(self.stages)))
        launch, finish = col["Task Info.Launch Time"], col["Task Info.Finish Time"]
        valid = (finish >= launch) & (launch > 0)
        self.skipped["task of a stage never submitted"] += int((~known).sum())
        self.skipped["task with invalid launch/finish time"] += int((known & ~valid).sum())
        self.skipped["task without metrics"] += int((known & valid & col["no_metrics"]).sum())
        keep = known & valid
        if not keep.any():
            return
        c = {k: v[keep] for k, v in col.items()}
        stage_ids = c["Stage ID"].astype(np.int64)
        launch, finish = c["Task Info.Launch Time"], c["Task Info.Finish Time"]
        reason = c["Task End Reason.Reason"]
        killed = c["Task Info.Killed"] | (reason == "TaskKilled")
        status = np.where(reason == "Success", 0, np.where(killed, 2, 1))  # codes into _STATUSES
        for code, name in enumerate(_STATUSES[1:], start=1):
            count = int((status == code).sum())
            if count:
                self.skipped[f"{name} task attempt (kept, marked {name})"] += count
        workers, early = self._slots.place(c["Task Info.Executor ID"], launch, finish, self.executor_cores)
        if early:
            self.skipped["task launched before its slot's previous task was reported finished"] += early

        getting_at = c["Task Info.Getting Result Time"]
        getting = np.where(getting_at > 0, np.maximum(0.0, finish - getting_at), 0.0)
        run, deserialize = c["Task Metrics.Executor Run Time"], c["Task Metrics.Executor Deserialize Time"]
        result_ser = c["Task Metrics.Result Serialization Time"]
        fetch_wait = c["Task Metrics.Shuffle Read Metrics.Fetch Wait Time"]
        shuffle_write = c["Task Metrics.Shuffle Write Metrics.Shuffle Write Time"] / 1e6  # nanoseconds
        scheduling = np.maximum(0.0, (finish - launch) - run - deserialize - result_ser - getting)
        processing = np.maximum(0.0, run - fetch_wait - shuffle_write)
        durations = np.stack(
            [scheduling, deserialize, fetch_wait, processing, shuffle_write + result_ser, getting], axis=1
        )
        ends = np.minimum(launch[:, None] + np.cumsum(durations, axis=1), finish[:, None])
        starts = np.concatenate([launch[:, None], ends[:, :-1]], axis=1)

        rows = ActivityRows()
        for k, activity in enumerate(STEP_ACTIVITIES):
            present = np.flatnonzero(ends[:, k] > starts[:, k])
            rows.add(
                present,
                activity,
                starts[present, k],
                ends[present, k],
                workers[present],
                traffic=activity == "processing",
            )
        tail = np.flatnonzero(ends[:, -1] < finish)
        rows.add(tail, "unknown", ends[tail, -1], finish[tail], workers[tail])
        everyone = np.arange(len(launch))
        driver = self._slots.code(DRIVER)
        rows.add(everyone, "control", launch, launch + scheduling, driver, src=driver, dst=workers)
        rows.add(
            everyone, "data", np.where(getting > 0, finish - getting, finish), finish, workers, src=workers, dst=driver
        )
        ok = status == _STATUSES.index("success")
        parents_of = self._parents_of
        child, senders, start, end = self._senders.messages(
            self._slots, parents_of, stage_ids, ok, workers, starts[:, 2], ends[:, 2], finish
        )
        rows.add(child, "data", start, end, workers[child], src=senders, dst=workers[child])

        stage_keys, stage_code = np.unique(stage_ids, return_inverse=True)
        stages = [self.stages[int(s)] for s in stage_keys]
        per_task = {
            "batch_id": np.array([st.batch_id for st in stages], dtype=np.int64)[stage_code],
            "job_id": np.array([st.job_id for st in stages], dtype=np.int64)[stage_code],
            "stage_id": stage_ids,
            "stage_attempt": c["Stage Attempt ID"].astype(np.int64),
            "task_id": c["Task Info.Task ID"].astype(np.int64),
            "attempt": c["Task Info.Attempt"].astype(np.int64),
            "speculative": c["Task Info.Speculative"].astype(bool),
        }
        traffic = {
            "records_in": c["Task Metrics.Shuffle Read Metrics.Total Records Read"]
            + c["Task Metrics.Input Metrics.Records Read"],
            "records_out": c["Task Metrics.Shuffle Write Metrics.Shuffle Records Written"]
            + c["Task Metrics.Output Metrics.Records Written"],
            "bytes_in": (
                c["Task Metrics.Shuffle Read Metrics.Remote Bytes Read"]
                + c["Task Metrics.Shuffle Read Metrics.Local Bytes Read"]
                + c["Task Metrics.Input Metrics.Bytes Read"]
            ),
            "bytes_out": c["Task Metrics.Shuffle Write Metrics.Shuffle Bytes Written"]
            + c["Task Metrics.Output Metrics.Bytes Written"],
            "cpu_ms": (c["Task Metrics.Executor CPU Time"] + c["Task Metrics.Executor Deserialize CPU Time"])
            / 1e6,  # ns
        }
        labels = {
            "query_id": ([st.query_id for st in stages], stage_code),
            "operator": ([st.operator for st in stages], stage_code),
            "status": (list(_STATUSES), status),
        }
        self._frames.append(rows.table(self.app_id, per_task, traffic, labels, list(self._slots.names)))

    def _parents_of(self, stage_id: int) -> list[int]:
        return self.stages[stage_id].parents

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
            "skipped": {reason: count for reason, count in self.skipped.items() if count},
            "job_props": {str(j): list(v) for j, v in self._job_props.items() if j in recent_jobs},
            "job_ordinal": {str(j): o for j, o in self._job_ordinal.items() if j in recent_jobs},
            "batch_jobs": [[q, b, n] for (q, b), n in list(self._batch_jobs.items())[-keep_stages:]],
            "slots_free_at": dict(self._slots.free_at),
            "senders": self._senders.state(recent),
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
        normalizer._slots.free_at.update({k: list(v) for k, v in state["slots_free_at"].items()})
        normalizer._senders = ShuffleSenders.from_state(state["senders"])
        return normalizer

    def take_rows(self) -> pd.DataFrame:
        """The rows normalized since the last call (and forget them): for incremental ingestion."""
        frame = self.table()
        self._frames = []
        return frame

    # -- output --------------------------------------------------------------------------------

    def table(self) -> pd.DataFrame:
        """Every activity normalized so far (see module docstring for the schema)."""
        self._flush_pending()
        if not self._frames:
            return _empty_table()
        return pa.concat_tables(self._frames).to_pandas().astype(_DTYPES)


def _empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_DTYPES.get(c, "object")) for c in ACTIVITY_COLUMNS})
