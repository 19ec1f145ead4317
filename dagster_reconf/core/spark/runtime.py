"""Run one managed stream inside this process: start, stop at a batch boundary, restart.

:class:`StreamRuntime` is what the driver process runs, and what in-process tests and
benchmarks use directly. It builds the query with the user's stream definition
(:mod:`dagster_reconf.core.definition`) and owns only what the control plane owns: the checkpoint location,
the query name, the trigger and the knobs. Its contract:

* ``start()`` starts the query from the stream's checkpoint (new or existing).
* ``stop_at_batch_boundary()`` returns only when the query is stopped *and* its checkpoint's last batch is
  committed (:mod:`dagster_reconf.core.spark.batch_boundary`).
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from dagster_reconf.core.definition import StreamContext
from dagster_reconf.core.errors import SpecError, StreamStartError, StreamStateError
from dagster_reconf.core.progress.delivery import Delivery, delivery
from dagster_reconf.core.progress.lifecycle import (
    ExecutorsResized,
    FileSinkLogAligned,
    PythonTaskCpuFailed,
    Restarted,
    Started,
)
from dagster_reconf.core.progress.source_kinds import FileBacklogProbe
from dagster_reconf.core.spark.batch_boundary import StopReport, stop_at_batch_boundary
from dagster_reconf.core.spark.event_log_shipping import EventLogShipper
from dagster_reconf.core.spark.executor_growth import EXECUTOR_START_WAIT_S, add_executors
from dagster_reconf.core.spark.executor_room import launched_executors
from dagster_reconf.core.spark.executors import executor_ids, resize_executors
from dagster_reconf.core.spark.listener import ProgressRecorder
from dagster_reconf.core.spark.python_task_overhead import kept_python_task_cpu_ms
from dagster_reconf.core.spark.python_worker_cpu import PythonCpuSampler
from dagster_reconf.core.spark.query_builder import build_writer, start_writer, stream_context
from dagster_reconf.core.spark.session import build_spark_session
from dagster_reconf.core.spark.stream_status import stream_status
from dagster_reconf.core.spark.termination import first_line
from dagster_reconf.core.spark.user_trigger import read_trigger, resolve_trigger
from dagster_reconf.core.spark.warm_up import warm_up_file_write, warm_up_job, warm_up_state_query
from dagster_reconf.core.spec import RestartScope, StreamSpec, restart_scope, validate_spec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.file_sink import COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL, align_file_sink_log
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import Location, is_local, remove_tree

__all__ = ["StopReport", "StreamRuntime"]


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
        self._log_shipper: EventLogShipper | None = None
        self._query_checkpoint: Location | None = None
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
            self._spark = build_spark_session(self.spec, self._event_log_dir(), self._temp_dir)
            self._recorder = None
            if self.spec.executors is not None:  # the master launched up to the ceiling: keep max_cores' worth
                resized = resize_executors(
                    self._spark,
                    self.spec.executors,
                    wait_s=EXECUTOR_START_WAIT_S,
                    settle=True,
                    launched=launched_executors(
                        self.spec.master,
                        self.paths.home,
                        self._spark.sparkContext.applicationId,
                        self.spec.executor_cores,
                    ),
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

    def _measure_sources(self, progress: dict[str, Any]) -> list[dict[str, Any]]:
        """What the progress does not say about each source (a file source's unread files)."""
        checkpoint = self._query_checkpoint or self.paths.checkpoint
        probe = self._file_probes.setdefault(str(checkpoint), FileBacklogProbe(checkpoint))
        return [probe.measure(source) for source in progress.get("sources") or []]

    def _event_log_dir(self) -> Location:
        """Where Spark writes the event logs: their folder, or this disk where that is an object store (shipped)."""
        target = self.paths.event_log
        if is_local(target):
            return target
        if self._log_shipper is None:
            self._log_shipper = EventLogShipper(self.paths.work / "eventlog", target).start()
        return self._log_shipper.local

    def _drop_session(self) -> None:
        """Stop the owned session; the next use of :attr:`spark` builds a new one (same JVM)."""
        if self._spark is not None:
            self._spark.stop()
        if self._log_shipper is not None:
            self._log_shipper.ship_finished()  # the application's end: its finished logs, then none left here
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
        # The definition's own trigger is honoured, or the stream refused (user_trigger): the spec in force says which.
        spec = resolve_trigger(spec, read_trigger(writer), self.definition.name)
        if purpose == "stream" and spec != self.spec:
            self.spec = spec
        checkpoint = checkpoint or self.paths.checkpoint
        if purpose == "stream":  # each batch's source probe reads this one, not the storage's generation file
            self._query_checkpoint = checkpoint
        return start_writer(writer, spec, checkpoint, purpose=purpose, once=once, what=self.definition.name)

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
            self.check_checkpoint_matches(self.spec)
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
            state_stores = self.warm_up_state_stores(slots)
            file_writer = self.scratch_warm_up(warm_up_file_write, slots)
            self._built = (self.spec, self.writer())  # the next start of the stream's own query uses it
            return {
                "slots": slots,
                "python_workers_s": round(workers_s, 3),
                "state_stores": state_stores,
                "file_writer": file_writer,
                "seconds": round(time.monotonic() - started, 3),
            }

    def warm_up_state_stores(self, tasks: int) -> dict[str, Any] | None:
        """Run a throwaway stateful query (see :func:`warm_up_state_query`) if the stream keeps state."""
        return self.scratch_warm_up(warm_up_state_query, tasks) if self.stateful else None

    def scratch_warm_up(self, run: Callable[[SparkSession, int, Location], None], tasks: int) -> dict[str, Any]:
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

    def check_checkpoint_matches(self, spec: StreamSpec) -> None:
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
        """Stop with the checkpoint's last batch committed (:func:`.batch_boundary.stop_at_batch_boundary`)."""
        return stop_at_batch_boundary(
            self, timeout_s, finish=finish, keep_interrupted=keep_interrupted, boundary_wait_s=boundary_wait_s
        )

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

    def _last_progress(self) -> dict[str, Any]:
        return (self.query.lastProgress if self.query is not None else None) or {}

    def last_batch_id(self) -> int | None:
        batch = self._last_progress().get("batchId")
        return None if batch is None else int(batch)

    def last_batch_s(self) -> float:
        return (self._last_progress().get("durationMs") or {}).get("triggerExecution", 0) / 1000.0

    def add_executors(self, count: int, wait_s: float = EXECUTOR_START_WAIT_S) -> dict[str, Any]:
        """Grow to ``count`` executors while the query runs, and warm them
        (:func:`~dagster_reconf.core.spark.executor_growth.add_executors`)."""
        return add_executors(self, count, wait_s)

    def status(self) -> dict[str, Any]:
        """Where the stream stands (:func:`~dagster_reconf.core.spark.stream_status.stream_status`)."""
        return stream_status(self)

    @property
    def failure(self) -> str | None:
        """Why the query failed, as the progress listener saw it (None: it did not)."""
        return self._recorder.failure if self._recorder else None

    @property
    def session_if_started(self) -> SparkSession | None:
        """The session, without building one."""
        return self._spark

    def delivery(self, record: dict[str, Any] | None = None) -> Delivery:
        """What a stop and restart does to the stream's data, from its last progress (or ``record``)."""
        progress = (record or self.store.last_progress() or {}).get("progress")
        return delivery(progress, replayable=self.definition.replayable, accept_loss=self.spec.accept_loss)

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
