"""Run one managed stream inside this process: start, stop at a batch boundary, restart.

:class:`StreamRuntime` is what the driver process runs, and what in-process tests and
benchmarks use directly. It builds the query with the user's stream definition
(:mod:`dagster_reconf.core.definition`) and owns only what the control plane owns: the checkpoint location,
the query name, the trigger and the knobs. Its contract:

* ``start()`` starts the query from the stream's checkpoint (new or existing).
* ``stop_at_batch_boundary()`` returns only when the query is stopped *and* its
  checkpoint's last batch is committed (the precondition of Spark's offline state
  repartition), for any source: at once, unless a running batch has already written (one
  of its Spark jobs succeeded): then at its commit, before the next batch can write. A
  batch the stop interrupted before any of its Spark jobs succeeded has reached no sink
  (:mod:`dagster_reconf.core.spark.batch_jobs`): its plan is dropped
  and the next start plans it again, as if the stop had come before it. Otherwise the
  interrupted batch is finished from the offset log (a once-trigger run re-runs the
  planned, uncommitted batch with its logged offsets, into the stream's own sink, and
  nothing after it). Sinks that are exactly-once by batch id (files, idempotent
  ``foreachBatch``) see no difference; an at-least-once sink may see the interrupted
  batch's rows twice, as after any failure.
* ``restart(changes)`` applies new settings: a query restart, or a new SparkContext in
  the same process (the JVM stays warm) for session settings, or executors added or
  removed in the same SparkContext for a cores change within the spec's ``cores_ceiling``
  (:mod:`dagster_reconf.core.spark.executors`). If the new settings fail
  to start, the old ones are restored and started again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from dagster_reconf.core.definition import StreamContext
from dagster_reconf.core.errors import SpecError, StreamStartError, StreamStateError
from dagster_reconf.core.progress.lifecycle import (
    ExecutorsResized,
    FileSinkLogAligned,
    PythonTaskCpuFailed,
    Restarted,
    Started,
    Stopped,
)
from dagster_reconf.core.progress.source_kinds import FileBacklogProbe
from dagster_reconf.core.spark.batch_jobs import batch_has_written, batch_may_have_written
from dagster_reconf.core.spark.executor_room import (
    DEFAULT_EXECUTOR_MEMORY,
    executor_room_problem,
    granted_cores,
    master_ui,
)
from dagster_reconf.core.spark.executors import completed_tasks, executor_ids, resize_executors
from dagster_reconf.core.spark.listener import ProgressRecorder
from dagster_reconf.core.spark.python_task_overhead import kept_python_task_cpu_ms
from dagster_reconf.core.spark.python_worker_cpu import PythonCpuSampler
from dagster_reconf.core.spark.query_builder import build_writer, start_writer, stream_context
from dagster_reconf.core.spark.session import build_spark_session
from dagster_reconf.core.spark.termination import await_termination, first_line
from dagster_reconf.core.spark.warm_up import warm_up_file_write, warm_up_job, warm_up_state_query
from dagster_reconf.core.spec import RestartScope, StreamSpec, restart_scope, validate_spec
from dagster_reconf.core.store.checkpoint import checkpoint_facts, drop_planned_batch
from dagster_reconf.core.store.file_sink import COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL, align_file_sink_log
from dagster_reconf.core.store.metrics import MetricsStore, status_figures
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import Location, remove_tree

__all__ = ["StopReport", "StreamRuntime"]

POLL_INTERVAL_S = 0.02
EXECUTOR_START_WAIT_S = 90.0  # a new context's executors register (and its surplus is removed) within this
EXECUTOR_WARM_WAIT_S = 30.0  # the most that warming executors added ahead of a pause may take
WARM_BATCHES = 2  # batches committed once added executors registered: the stream's whole plan had its chance there


@dataclass(frozen=True)
class StopReport:
    """How a stop at a batch boundary went.

    Attributes:
        last_committed_batch: the batch the checkpoint ends at.
        seconds: from the request to the stopped, committed checkpoint.
        attempts: 1 when the query was stopped between triggers; 2 when a batch was
            interrupted (then finished from the offset log, dropped, or left to the next driver).
        finished_batch: the interrupted batch that was finished, if any.
        dropped_batch: the interrupted batch no sink had seen, whose plan was dropped (planned
            again at the next start), if any.
    """

    last_committed_batch: int | None
    seconds: float
    attempts: int
    finished_batch: int | None = None
    dropped_batch: int | None = None


class StreamRuntime:
    """One managed stream in this process (see module docstring for the contract).

    Args:
        spec: the stream to run.
        paths: where its checkpoint, event log, metrics and work files live.
        spark: an existing session to use (tests share one per module); if given, the
            runtime never stops it and cannot apply session-scope settings.
        temp_dir: where the sessions it builds keep their temporary files (a driver process's
            :meth:`~dagster_reconf.core.store.paths.StreamPaths.driver_temp_of`); default ``/tmp``.

    All public methods are thread-safe (one control operation at a time, under :attr:`lock`).
    """

    def __init__(
        self, spec: StreamSpec, paths: StreamPaths, *, spark: SparkSession | None = None, temp_dir: Path | None = None
    ) -> None:
        self.definition = validate_spec(spec)
        self.spec = spec
        self.paths = paths
        self.store = MetricsStore(paths.metrics)
        self._spark = spark
        self._owns_session = spark is None
        self._temp_dir = temp_dir
        self._built: tuple[StreamSpec, DataStreamWriter] | None = None  # the query a warm-up built, for the next start
        self._recorder: ProgressRecorder | None = None
        self._cpu_sampler: PythonCpuSampler | None = None
        self._file_probes: dict[str, FileBacklogProbe] = {}
        self.query: StreamingQuery | None = None
        self.lock = threading.RLock()
        paths.create()
        if not paths.spec.is_file():
            paths.write_spec(spec.model_dump_json(indent=2))  # every reader finds the checkpoint's storage in it
        elif paths.storage != spec.storage:
            raise SpecError(
                f"stream {spec.name!r} keeps its checkpoint and event logs at {paths.storage or paths.root}; "
                f"a spec cannot move them (storage {spec.storage!r}): start a new stream with another name"
            )

    # -- session ---------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The session the stream runs in, built on first use."""
        if self._spark is None:
            self._spark = build_spark_session(self.spec, self.paths.event_log, self._temp_dir)
            self._recorder = None
            if (
                self.spec.executors is not None
            ):  # the master launched executors up to the ceiling: keep max_cores' worth
                resized = resize_executors(
                    self._spark,
                    self.spec.executors,
                    wait_s=EXECUTOR_START_WAIT_S,
                    settle=True,
                    launched=self._launched_executors(self._spark),
                )
                self.store.append(ExecutorsResized(stream=self.spec.name, **resized.as_dict()).to_record())
        if self._recorder is None and self.spec.instrumentation:
            # The Python task workers run under this driver in local mode only: their CPU is measured there.
            if self.spec.master.startswith("local") and self._cpu_sampler is None:
                self._cpu_sampler = PythonCpuSampler().start()
            sampler = self._cpu_sampler
            self._recorder = ProgressRecorder(
                self.store,
                self.spec.name,
                sampler.read if sampler else None,
                self._measure_sources,
                cpu_samples=sampler.drain if sampler else None,
                worker_count=sampler.workers if sampler else None,
                python_task_cpu_ms=self._python_task_cpu_ms() if sampler else None,
            )
            self._spark.streams.addListener(self._recorder)
        return self._spark

    def _python_task_cpu_ms(self) -> float | None:
        """PySpark's own CPU per Python task on this machine (see
        :mod:`dagster_reconf.core.spark.python_task_overhead`), kept in the user's cache;
        None where it cannot be measured: a profile without it is only less sure of its Python stages."""
        try:
            return kept_python_task_cpu_ms(self._spark, [self.definition.name.split(":")[0]])
        except Exception as exc:
            self.store.append(PythonTaskCpuFailed(stream=self.spec.name, error=first_line(exc)).to_record())
            return None

    def _launched_executors(self, spark: SparkSession) -> Callable[[], int | None] | None:
        """How many executors the standalone master has launched for this application (None where its UI is not
        found): what settling a new context's executors waits for."""
        url = master_ui(self.spec.master, self.paths.home)
        if url is None or self.spec.executor_cores is None:
            return None
        app_id, cores = spark.sparkContext.applicationId, self.spec.executor_cores

        def launched() -> int | None:
            granted = granted_cores(url, app_id)
            return None if granted is None else granted // cores

        return launched

    def _measure_sources(self, progress: dict[str, Any]) -> list[dict[str, Any]]:
        """What the progress does not say about each source (a file source's unread files)."""
        checkpoint = self.paths.checkpoint
        probe = self._file_probes.setdefault(str(checkpoint), FileBacklogProbe(checkpoint))
        return [probe.measure(source) for source in progress.get("sources") or []]

    def _drop_session(self) -> None:
        """Stop the owned session; the next use of :attr:`spark` builds a new one (same JVM)."""
        if self._spark is not None:
            self._spark.stop()
        self._stop_sampler()
        self._spark, self._recorder, self._built = None, None, None

    def _stop_sampler(self) -> None:
        if self._cpu_sampler is not None:
            self._cpu_sampler.stop()
            self._cpu_sampler = None

    # -- building the query --------------------------------------------------------------

    def context(self, spec: StreamSpec | None = None, purpose: str = "stream") -> StreamContext:
        """What the stream definition gets: the knobs, the source options they map to, the workload's options."""
        return stream_context(self.definition, spec or self.spec, self.paths.work, purpose)

    def writer(self, spec: StreamSpec | None = None, purpose: str = "stream") -> DataStreamWriter:
        """The user's query for ``spec``, as the definition returns it (checkpoint, name and trigger not set yet).

        Raises:
            StreamStartError: the definition raised, or returned something else than a writer.
        """
        spec = spec or self.spec
        self._use_state_partitions(spec)
        return build_writer(self.definition, self.spark, self.context(spec, purpose))

    def _use_state_partitions(self, spec: StreamSpec) -> None:
        """A new checkpoint takes its state partitions from the session (an existing one keeps its own)."""
        self.spark.conf.set("spark.sql.shuffle.partitions", str(spec.state_partitions))

    def start_query(
        self,
        spec: StreamSpec | None = None,
        *,
        checkpoint: Path | Any | None = None,
        purpose: str = "stream",
        once: bool = False,
    ) -> StreamingQuery:
        """Start ``spec``'s query (default: the stream itself, into its checkpoint).

        Args:
            checkpoint: another checkpoint (a replay's new generation, a probe's scratch one).
            purpose: ``stream``; ``replay`` and ``probe`` discard the output (noop sink) and run
                under another query name, so their batches never count as the stream's.
            once: run one trigger and stop (a pending batch, or one new batch).
        """
        spec = spec or self.spec
        if purpose == "stream" and checkpoint is None and self._built is not None and self._built[0] == spec:
            # Built by the warm-up (a standby's): the definition and its sources' look-ups (0.15-0.2 s, measured with a
            # Python source) are not paid again in a handover's pause.
            self._use_state_partitions(spec)
            writer, self._built = self._built[1], None
        else:
            writer = self.writer(spec, purpose)
        return start_writer(
            writer, spec, checkpoint or self.paths.checkpoint, purpose=purpose, once=once, what=self.definition.name
        )

    # -- query lifecycle ---------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.query is not None and self.query.isActive

    @property
    def stateful(self) -> bool:
        """Whether the stream keeps state, from its checkpoint's state metadata (unknown before the first batch:
        False)."""
        return checkpoint_facts(self.paths.checkpoint).stateful

    def start(self) -> StreamingQuery:
        """Start the query from its checkpoint; a no-op if it is already running.

        A checkpoint that ends with a planned but uncommitted batch (a driver died
        mid-batch) simply resumes with that batch.
        """
        with self.lock:
            if self.is_active:
                assert self.query is not None
                return self.query
            self._check_checkpoint_matches(self.spec)
            self._align_sink_log()
            self.query = self.start_query()
            self.paths.add_query_id(str(self.query.id))
            self.paths.write_spec(self.spec.model_dump_json(indent=2))
            self.store.append(Started(stream=self.spec.name, spec=self.spec.model_dump()).to_record())
            return self.query

    def _align_sink_log(self) -> None:
        """Batches a state migration added without running the sink get their (empty) file-sink log entries; those
        of a migration rolled back are removed (:mod:`dagster_reconf.core.store.file_sink`)."""
        record = self.store.last_progress()
        sink = (((record or {}).get("progress") or {}).get("sink") or {}).get("description")
        interval = int(self.spark.conf.get(COMPACT_INTERVAL_CONF, str(DEFAULT_COMPACT_INTERVAL)))
        aligned = align_file_sink_log(self.paths.checkpoint, sink, interval)
        if aligned:
            self.store.append(
                FileSinkLogAligned(stream=self.spec.name, batches=aligned.filled, cleared=aligned.cleared).to_record()
            )

    def await_healthy(self, timeout_s: float) -> dict[str, Any]:
        """Wait until the query has processed a batch of input, or waits for input that is not there yet; raise
        if it failed first (a user's query that fails on its first data fails its start, not an hour later).

        Raises:
            StreamStartError: the query failed (its first batch, typically) or did not get going in time.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            query = self.query
            if query is None:
                raise StreamStartError(f"stream {self.spec.name!r} has no query")
            active = query.isActive  # read first: a query that stopped has set its exception before
            exception = query.exception()
            if exception is not None or not active:
                detail = first_line(exception) if exception is not None else "it stopped"
                raise StreamStartError(
                    f"stream {self.spec.name!r} ({self.definition.name}) failed in its first batch: {detail}"
                )
            status = query.status
            processed = [p for p in query.recentProgress if p.numInputRows > 0]
            if processed or status.get("message") == "Waiting for data to arrive":
                return {"message": status.get("message"), "batches": len(query.recentProgress)}
            if time.monotonic() > deadline:
                raise StreamStartError(
                    f"stream {self.spec.name!r} did not process a batch within {timeout_s:g} s "
                    f"(status: {status.get('message')!r})"
                )
            time.sleep(0.1)

    def warm_up(self) -> dict[str, Any]:
        """Pay a new driver's start-up before the stream needs it (a standby driver, see
        :mod:`dagster_reconf.core.process.driver`).

        Starts the SparkContext, runs a small Python job on every task slot (Spark keeps those
        workers for the stream's Python tasks), opens a state store (a stateful stream) and
        writes a few rows to files, in scratch directories (see :func:`warm_up_file_write`), and builds the user's
        query, which imports their code and analyses the plan. The query is not started: the next start of the
        stream with these settings starts the one built here.
        """
        with self.lock:
            started = time.monotonic()
            spark = self.spark
            slots = spark.sparkContext.defaultParallelism
            warm_up_job(spark, slots)
            workers_s = time.monotonic() - started
            state_stores = self._warm_up_state_stores(slots)
            file_writer = self._scratch_warm_up(warm_up_file_write, slots)
            self._built = (self.spec, self.writer())  # the next start of the stream's own query uses it
            return {
                "slots": slots,
                "python_workers_s": round(workers_s, 3),
                "state_stores": state_stores,
                "file_writer": file_writer,
                "seconds": round(time.monotonic() - started, 3),
            }

    def _warm_up_state_stores(self, tasks: int) -> dict[str, Any] | None:
        """Run a throwaway stateful query (see :func:`warm_up_state_query`) if the stream keeps state."""
        return self._scratch_warm_up(warm_up_state_query, tasks) if self.stateful else None

    def _scratch_warm_up(self, run: Callable[[SparkSession, int, Location], None], tasks: int) -> dict[str, Any]:
        """``run(spark, tasks, scratch)`` with a scratch directory beside the stream's checkpoint, removed after; never
        fails: a stream without the warm-up is only slower."""
        started = time.monotonic()
        scratch = self.paths.data_root_for(self.paths.storage) / f"warm-up-{uuid.uuid4().hex[:12]}"
        try:
            run(self.spark, tasks, scratch)
        except Exception as exc:
            return {"failed": first_line(exc)}
        finally:
            remove_tree(scratch)
        return {"seconds": round(time.monotonic() - started, 3)}

    def _check_checkpoint_matches(self, spec: StreamSpec) -> None:
        info = checkpoint_facts(self.paths.checkpoint)
        if info.stateful and info.state_partitions not in (None, spec.state_partitions):
            raise StreamStateError(
                f"checkpoint {self.paths.checkpoint} has {info.state_partitions} state partitions but the spec asks "
                f"for {spec.state_partitions}; state partitions change only through a state migration, so set "
                f"state_partitions={info.state_partitions} or run a reconfiguration"
            )

    def stop_at_batch_boundary(
        self,
        timeout_s: float = 120.0,
        *,
        finish: bool = True,
        keep_interrupted: bool = False,
        boundary_wait_s: float | None = None,
    ) -> StopReport:
        """Stop with the checkpoint's last batch committed (see module docstring).

        ``finish=False`` leaves an interrupted batch planned but uncommitted, for a driver that
        finishes it next (a warm standby with more cores, after a handover); the report's
        ``attempts`` is 2 and ``finished_batch`` None then. One no sink saw is dropped even so,
        unless ``keep_interrupted``: then the next start runs it first, at the size it was
        planned with (a batch of the old cap on the new cores, where a re-planned one would
        take the new cap's catch-up batch); nor does it wait for a running batch that has
        written (the next start re-runs it from the offset log, as after a failure).
        ``boundary_wait_s`` caps the wait for a running batch's commit (default: 1.5x the
        last batch, at least 1 s; 0 interrupts it).
        """
        if finish and keep_interrupted:
            raise ValueError("keep_interrupted needs finish=False: a finished batch is committed, not kept")
        with self.lock:
            started = time.monotonic()
            deadline = started + timeout_s
            if not self.is_active:
                info = checkpoint_facts(self.paths.checkpoint)
                if info.committed or not finish:
                    return StopReport(info.last_committed_batch, 0.0, 0)
                finished = self._finish_pending(deadline, timeout_s)  # a driver died mid-batch
                return self._stopped(started, 1, finished)
            assert self.query is not None
            commit_wait_s = max(1.0, 1.5 * self._last_batch_s())
            if boundary_wait_s is not None:
                commit_wait_s = min(commit_wait_s, boundary_wait_s)
            if commit_wait_s > 0 and not keep_interrupted and self._running_batch_wrote():
                # Interrupted now, it would be re-run (a query start plus the batch): the rest of it costs less. A kept
                # batch is re-run by the next start anyway, on more cores, where waiting would add the next batch.
                self._await_next_commit(min(deadline, started + commit_wait_s))
            run_id = str(self.query.runId)
            self.query.stop()
            info = checkpoint_facts(self.paths.checkpoint)
            if info.committed:
                return self._stopped(started, 1, None)
            # It interrupted a batch: one that had not written, or one begun since the check.
            assert info.last_offset_batch is not None
            if not keep_interrupted and not batch_may_have_written(self.spark, run_id, info.last_offset_batch):
                drop_planned_batch(self.paths.checkpoint, info.last_offset_batch)
                return self._stopped(started, 2, None, dropped=info.last_offset_batch)
            return self._stopped(started, 2, self._finish_pending(deadline, timeout_s) if finish else None)

    def _await_next_commit(self, until: float) -> bool:
        """Wait until the running batch commits, until ``until``. Stopping right then interrupts the next batch before
        any of its jobs could succeed, so it is dropped and planned again; stopping at a random moment instead often
        finds it written and re-runs it, which costs a query start on top of the batch."""
        assert self.query is not None
        last = self._last_batch_id()  # Spark reports a batch's progress once its commit is written
        while time.monotonic() < until and self.query.exception() is None:
            if self._last_batch_id() != last:
                return True
            time.sleep(POLL_INTERVAL_S)
        return False

    def _finish_pending(self, deadline: float, timeout_s: float) -> int | None:
        """Re-run exactly the checkpoint's planned, uncommitted batch into the stream's sink, then stop."""
        info = checkpoint_facts(self.paths.checkpoint)
        if info.committed:
            return None
        self._check_checkpoint_matches(self.spec)
        query = self.start_query(once=True)
        self.query = query
        self.paths.add_query_id(str(query.id))
        if not await_termination(query, max(1.0, deadline - time.monotonic())):
            query.stop()
            raise StreamStateError(
                f"stream {self.spec.name!r}: the interrupted batch {info.last_offset_batch} did not "
                f"finish within {timeout_s:g} s; it is finished when the stream starts again"
            )
        if query.exception() is not None:
            raise StreamStateError(
                f"stream {self.spec.name!r}: finishing batch {info.last_offset_batch} failed: "
                f"{first_line(query.exception())}"
            )
        after = checkpoint_facts(self.paths.checkpoint)
        if not after.committed:
            raise StreamStateError(f"stream {self.spec.name!r}: batch {after.last_offset_batch} is still not committed")
        return info.last_offset_batch

    def _stopped(self, started: float, attempts: int, finished: int | None, dropped: int | None = None) -> StopReport:
        info = checkpoint_facts(self.paths.checkpoint)
        report = StopReport(info.last_committed_batch, time.monotonic() - started, attempts, finished, dropped)
        self.store.append(Stopped(stream=self.spec.name, **asdict(report)).to_record())
        return report

    def changed_spec(self, changes: dict[str, Any]) -> tuple[StreamSpec, RestartScope]:
        """The spec with ``changes``, validated against the definition, and what applying it costs.

        Raises:
            SpecError: invalid changes, or changes to the stream's identity or data.
        """
        old = self.spec
        new = old.with_changes(changes)
        validate_spec(new, self.definition)
        scope = restart_scope(old, new, stateful=self.stateful, frozen_options=self.definition.frozen_options)
        return new, scope

    def restart(self, changes: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        """Apply ``changes`` to the spec and restart with them (see module docstring).

        Returns:
            ``{"scope": ..., "stop": StopReport fields, "seconds": total}``.

        Raises:
            SpecError: the changes are invalid or would change the stream's data.
            StreamStateError: the change needs a state migration, or the stop timed out.
        """
        with self.lock:
            started = time.monotonic()
            old = self.spec
            new, scope = self.changed_spec(changes)
            if scope is RestartScope.STATE:
                raise StreamStateError(
                    f"changing state_partitions {old.state_partitions} -> {new.state_partitions} of stateful stream "
                    f"{old.name!r} moves state; run a reconfiguration with a state migration instead of a restart"
                )
            self._check_scope_allowed(scope, sorted(changes))  # before stopping: a refused change leaves it running
            if scope is RestartScope.NONE:
                return {"scope": scope.value, "stop": None, "seconds": 0.0}
            stop = self.stop_at_batch_boundary(timeout_s)
            try:
                self.apply(new, scope)
            except Exception:
                self.apply(old, scope)
                raise
            seconds = time.monotonic() - started
            self.store.append(
                Restarted(
                    stream=new.name, scope=scope.value, changes=changes, seconds=seconds, spec=new.model_dump()
                ).to_record()
            )
            return {"scope": scope.value, "stop": asdict(stop), "seconds": seconds}

    def _check_scope_allowed(self, scope: RestartScope, what: object) -> None:
        if scope in (RestartScope.SESSION, RestartScope.EXECUTORS) and not self._owns_session:
            raise StreamStateError(
                f"changing {what} needs a new SparkContext, but this runtime shares a "
                "session it does not own; run the stream in its own driver (`reconf stream start`)"
            )

    def apply(self, spec: StreamSpec, scope: RestartScope) -> None:
        """Start ``spec`` on a stopped query; a new SparkContext first for session scope."""
        self._check_scope_allowed(scope, "its session settings")
        self.spec = spec
        if scope is RestartScope.SESSION:
            self._drop_session()
        elif (
            self._spark is not None and spec.executors is not None and len(executor_ids(self._spark)) != spec.executors
        ):
            # A cores change within the ceiling, or executors added ahead of one that was rolled back. Added ones join
            # the running query as they come.
            resized = resize_executors(self._spark, spec.executors)
            self.store.append(ExecutorsResized(stream=spec.name, **resized.as_dict()).to_record())
        self.query = None
        self.start()

    def add_executors(self, count: int, wait_s: float = EXECUTOR_START_WAIT_S) -> dict[str, Any]:
        """Grow to ``count`` executors while the query runs, ahead of a reconfiguration that resumes with that many
        (their JVMs start outside its pause); never removes any: that waits for the pause.

        Then warms them (see :meth:`_await_warm`): a cold executor's first tasks load classes, compile the query's
        code and open the state store, which took seconds per task and, paid by the batch a pause finishes, most of
        that pause.

        Raises:
            StreamStateError: the spec has no ``cores_ceiling``, ``count`` is above it, or the master has no room for
                them (found before asking where its web UI answers, else when they have not come within ``wait_s``;
                the request is then withdrawn, so none joins later).
        """
        with self.lock:
            spec = self.spec
            if spec.executors is None or spec.cores_ceiling is None or spec.executor_cores is None:
                raise StreamStateError(
                    f"stream {spec.name!r} has no cores_ceiling: its executors are not resized in "
                    "place (a cores change starts a new SparkContext)"
                )
            if count * spec.executor_cores > spec.cores_ceiling:
                raise StreamStateError(
                    f"{count} executors of {spec.executor_cores} cores are above stream "
                    f"{spec.name!r}'s cores_ceiling {spec.cores_ceiling}"
                )
            held = executor_ids(self.spark)
            live = len(held)
            if count <= live:
                return {"added": 0, "executors": live}
            memory = spec.executor_memory_setting
            room = executor_room_problem(
                spec.master,
                count - live,
                executor_cores=spec.executor_cores,
                executor_memory=memory,
                home=self.paths.home,
            )
            if room:
                raise StreamStateError(room)
            resized = resize_executors(self.spark, count, wait_s=wait_s)
            self.store.append(ExecutorsResized(stream=spec.name, **resized.as_dict()).to_record())
            if resized.after < count:
                resize_executors(self.spark, resized.after)
                raise StreamStateError(
                    f"{resized.after} of {count} executors of stream {spec.name!r} registered within {wait_s:.0f} s: "
                    f"master {spec.master} placed no more. Each needs {spec.executor_cores} free core(s) and "
                    f"{memory or DEFAULT_EXECUTOR_MEMORY} of free memory on one worker; give the workers more, "
                    "or lower executor_memory"
                    + (
                        f" (the {resized.after - live} that came stay until the stream restarts)"
                        if resized.after > live
                        else ""
                    )
                )
            added = [i for i in executor_ids(self.spark) if i not in held]
        warm = self._await_warm(added, EXECUTOR_WARM_WAIT_S)  # without the lock: status answers meanwhile
        return {
            "added": resized.after - resized.before,
            "executors": resized.after,
            "seconds": resized.seconds,
            "warm": warm,
        }

    def _await_warm(self, added: list[str], wait_s: float) -> dict[str, Any]:
        """Warm executors just added, before a pause needs them.

        A small job first puts tasks on each (classes, code generation, a Python worker; the scheduler spreads
        tasks over free slots, so each gets some, nearly always in one go), a throwaway stateful query opens the
        state store there (the stream's own stateful tasks keep to the executors that hold their state, so its
        batches alone would not: its first stateful tasks on an added executor then took ~4 s, in the pause's
        batch), and a small file write loads the file writer. Then the stream's own batches run on them for
        ``WARM_BATCHES`` batches, bounded by a few batch lengths and ``wait_s`` (an idle stream runs no batch: a pause
        then has none to finish either). Executors still without a completed task are reported.
        """
        started = time.monotonic()
        first = self._last_batch_id()
        slots = len(executor_ids(self.spark)) * (self.spec.executor_cores or 1)
        cold = list(added)
        for _ in range(3):
            warm_up_job(self.spark, 4 * slots)
            tasks = completed_tasks(self.spark)
            cold = [i for i in added if not tasks.get(i)]
            if not cold:
                break
        state_stores = self._warm_up_state_stores(4 * slots)
        file_writer = self._scratch_warm_up(warm_up_file_write, 4 * slots)
        job_s = time.monotonic() - started
        deadline = started + min(
            wait_s, job_s + 2.0 + 2 * WARM_BATCHES * max(self.spec.trigger_interval_s, self._last_batch_s())
        )
        batches = 0
        while self.is_active and time.monotonic() < deadline:
            last = self._last_batch_id()
            batches = 0 if last is None else last - (first if first is not None else -1)
            if batches >= WARM_BATCHES:
                break
            time.sleep(0.5)
        return {
            "cold": cold,
            "batches": batches,
            "jobs_s": round(job_s, 3),
            "state_stores": state_stores,
            "file_writer": file_writer,
            "seconds": round(time.monotonic() - started, 3),
        }

    def _last_progress(self) -> dict[str, Any]:
        return (self.query.lastProgress if self.query is not None else None) or {}

    def _last_batch_id(self) -> int | None:
        batch = self._last_progress().get("batchId")
        return None if batch is None else int(batch)

    def _last_batch_s(self) -> float:
        return (self._last_progress().get("durationMs") or {}).get("triggerExecution", 0) / 1000.0

    def _running_batch_wrote(self) -> bool:
        """Whether a batch is running and one of its Spark jobs has succeeded: it may have reached its sink. Otherwise
        a stop now drops it (the next start plans it again), and nothing waits for it."""
        assert self.query is not None
        info = checkpoint_facts(self.paths.checkpoint)
        if info.committed or info.last_offset_batch is None:
            return False
        return batch_has_written(self.spark, str(self.query.runId), info.last_offset_batch)

    def status(self) -> dict[str, Any]:
        """Where the stream stands: state, last batch figures, backlog, state rows."""
        with self.lock:
            record = self.store.last_progress()
            failure = self._recorder.failure if self._recorder else None
            state = "running" if self.is_active else ("failed" if failure else "stopped")
            checkpoint = checkpoint_facts(self.paths.checkpoint)
            spark = self._spark
            return {
                "name": self.spec.name,
                "entrypoint": self.spec.entrypoint,
                "state": state,
                "failure": failure,
                "app_id": spark.sparkContext.applicationId if spark is not None else None,
                "spark_ui": spark.sparkContext.uiWebUrl if spark is not None else None,
                "master": self.spec.master,
                "executors": len(executor_ids(spark))
                if spark is not None and self.spec.executors is not None
                else None,
                "run_id": str(self.query.runId) if self.query is not None else None,
                "query_id": str(self.query.id) if self.query is not None else None,
                **status_figures(record),
                "checkpoint": checkpoint.summary(),
                "spec": self.spec.model_dump(),
            }

    def shutdown(self, timeout_s: float = 120.0, *, finish: bool = True) -> StopReport | None:
        """Stop the query at a batch boundary (forcibly if that fails) and the session we own.

        ``finish=False``: a driver that handed its stream over leaves an interrupted batch to the new driver.
        """
        with self.lock:
            report = None
            try:
                report = self.stop_at_batch_boundary(timeout_s, finish=finish)
            finally:
                if self.query is not None and self.query.isActive:
                    self.query.stop()
                if self._owns_session and self._spark is not None:
                    self._drop_session()
                self._stop_sampler()
            return report
