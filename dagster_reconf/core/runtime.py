"""Run one managed stream inside this process: start, stop at a batch boundary, restart.

:class:`StreamRuntime` is what the driver process runs, and what in-process tests and
benchmarks use directly. Its contract:

* ``start()`` starts the query from the stream's checkpoint (new or existing).
* ``stop_at_batch_boundary()`` returns only when the query is stopped *and* its
  checkpoint's last batch is committed (the precondition of Spark's offline state
  repartition). It engages the source gate so no new data batch starts, waits for the
  running batch to commit, stops, and checks the checkpoint; if the stop raced a
  starting batch, it re-runs that batch to completion (still gated) and tries again.
  On timeout it lifts the gate and leaves the query running: nothing half-done.
* ``restart(changes)`` applies new settings: a query restart, or a new SparkContext in
  the same process (the JVM stays warm) for session settings. If the new settings fail
  to start, the old ones are restored and started again.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from .checkpoint import checkpoint_facts
from .errors import SpecError, StreamStateError
from .listener import ProgressRecorder
from .metrics import MetricsStore, status_figures
from .paths import StreamPaths
from .python_workers import python_worker_cpu_s
from .session import build_spark_session
from .sink import BatchFileSink
from .spec import RestartScope, StreamSpec, restart_scope
from .storage import spark_uri
from .workloads.queries import RecordCost, get_query
from .workloads.options import SourceOptions
from .workloads.source import register_sources

__all__ = ["StopReport", "StreamRuntime"]

POLL_INTERVAL_S = 0.05
STOP_ATTEMPTS = 3


@dataclass(frozen=True)
class StopReport:
    """How a stop at a batch boundary went."""

    last_committed_batch: int | None
    seconds: float
    attempts: int


class StreamRuntime:
    """One managed stream in this process (see module docstring for the contract).

    Args:
        spec: the stream to run.
        paths: where its checkpoint, output, event log and metrics live.
        spark: an existing session to use (tests share one per module); if given, the
            runtime never stops it and cannot apply session-scope settings.

    All public methods are thread-safe (one control operation at a time, under :attr:`lock`).
    """

    def __init__(self, spec: StreamSpec, paths: StreamPaths, *, spark: SparkSession | None = None) -> None:
        self.spec = spec
        self.paths = paths
        self.store = MetricsStore(paths.metrics)
        self._spark = spark
        self._owns_session = spark is None
        self._recorder: ProgressRecorder | None = None
        self._sources_registered = False
        self.query: StreamingQuery | None = None
        self.lock = threading.RLock()
        paths.create()
        if not paths.spec.is_file():
            paths.write_spec(spec.model_dump_json(indent=2))  # every reader finds the checkpoint's storage in it
        elif paths.storage != spec.storage:
            raise SpecError(f"stream {spec.name!r} keeps its checkpoint and event logs at {paths.storage or paths.root}; "
                            f"a spec cannot move them (storage {spec.storage!r}): start a new stream with another name")

    # -- session ---------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The session the stream runs in, built on first use."""
        if self._spark is None:
            self._spark = build_spark_session(self.spec, self.paths.event_log)
            self._sources_registered = False
        if not self._sources_registered:
            register_sources(self._spark)
            self._sources_registered = True
            if self.spec.instrumentation:
                self._recorder = ProgressRecorder(self.store, self.spec.name, self._python_cpu_s)
                self._spark.streams.addListener(self._recorder)
        return self._spark

    def _python_cpu_s(self) -> float | None:
        """The Python task workers' CPU counter, where they run under this driver (local mode)."""
        return python_worker_cpu_s() if self.spec.master.startswith("local") else None

    def _drop_session(self) -> None:
        """Stop the owned session; the next use of :attr:`spark` builds a new one (same JVM)."""
        if self._spark is not None:
            self._spark.stop()
        self._spark, self._recorder, self._sources_registered = None, None, False

    # -- pacing ------------------------------------------------------------------------------

    def _pacing(self) -> dict[str, float]:
        """The source's pacing anchor: kept on disk so backlog survives restarts."""
        if self.paths.pacing.exists():
            return json.loads(self.paths.pacing.read_text())
        anchor = {"start_time": time.time(), "start_index": 0}
        self.paths.pacing.write_text(json.dumps(anchor))
        return anchor

    def source_options(self, spec: StreamSpec | None = None) -> SourceOptions:
        """The spec's data options plus pacing: rate, per-trigger cap, the anchor and the gate."""
        spec = spec or self.spec
        anchor = self._pacing()
        return SourceOptions.model_validate(
            {
                **spec.data_options().model_dump(),
                "rate": spec.rate,
                "max_events_per_trigger": spec.max_events_per_trigger,
                "start_time": anchor["start_time"],
                "start_index": int(anchor["start_index"]),
                "gate_file": str(self.paths.gate),
            }
        )

    def _reanchor(self, old: StreamSpec, new: StreamSpec) -> None:
        """Keep the events offered so far when the rate changes (no jump, no gap)."""
        if old.rate == new.rate:
            return
        now = time.time()
        offered = self.source_options(old).offered(now, now)
        self.paths.pacing.write_text(json.dumps({"start_time": now, "start_index": offered}))

    # -- query lifecycle ---------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.query is not None and self.query.isActive

    def start(self) -> StreamingQuery:
        """Start the query from its checkpoint; a no-op if it is already running."""
        with self.lock:
            if self.is_active:
                assert self.query is not None
                return self.query
            self._check_checkpoint_matches(self.spec)
            self.paths.gate.unlink(missing_ok=True)
            self.query = self.start_query()
            self.paths.write_spec(self.spec.model_dump_json(indent=2))
            self.store.append({"kind": "lifecycle", "stream": self.spec.name, "event": "started", "spec": self.spec.model_dump()})
            return self.query

    def _check_checkpoint_matches(self, spec: StreamSpec) -> None:
        info = checkpoint_facts(self.paths.checkpoint)
        if get_query(spec.query).stateful and info.state_partitions not in (None, spec.state_partitions):
            raise StreamStateError(
                f"checkpoint {self.paths.checkpoint} has {info.state_partitions} state partitions but the spec asks "
                f"for {spec.state_partitions}; state partitions change only through a state migration, so set "
                f"state_partitions={info.state_partitions} or run a reconfiguration"
            )

    def start_query(self, spec: StreamSpec | None = None, *, checkpoint: Path | None = None,
                     sink: Callable[[DataFrame, int], None] | None = None, name: str | None = None,
                     source_overrides: dict[str, str] | None = None) -> StreamingQuery:
        """Start ``spec``'s query (default: the stream itself, into its checkpoint and sink)."""
        spec = spec or self.spec
        query = get_query(spec.query)
        # A new checkpoint takes its state partitions from the session (an existing one keeps its own).
        self.spark.conf.set("spark.sql.shuffle.partitions", str(spec.state_partitions))
        options = {**self.source_options(spec).to_spark(), **(source_overrides or {})}
        source = self.spark.readStream.format(query.source).options(**options)
        events = RecordCost(spec.cost.mode, spec.cost.micros_per_record).apply(source.load())
        output = self.paths.output_of(self.paths.generation).resolve().as_uri()
        writer = (
            query.builder(spec.code_version)(events)
            .writeStream.queryName(name or spec.name)
            .outputMode(query.output_mode)
            .foreachBatch(sink or BatchFileSink(output))
            .option("checkpointLocation", spark_uri(checkpoint or self.paths.checkpoint))
        )
        if spec.trigger_interval_s > 0:
            writer = writer.trigger(processingTime=f"{round(spec.trigger_interval_s * 1000)} milliseconds")
        return writer.start()

    def stop_at_batch_boundary(self, timeout_s: float = 120.0) -> StopReport:
        """Stop once the running batch has committed (see module docstring)."""
        with self.lock:
            started = time.monotonic()
            if not self.is_active:
                info = checkpoint_facts(self.paths.checkpoint)
                if info.committed:
                    return StopReport(info.last_committed_batch, 0.0, 0)
                # Stopped with a planned batch uncommitted (its driver died mid-batch): finish it, gated.
                self.paths.gate.touch()
                self._check_checkpoint_matches(self.spec)
                self.query = self.start_query()
            assert self.query is not None
            deadline = started + timeout_s
            self.paths.gate.touch()
            try:
                for attempt in range(1, STOP_ATTEMPTS + 1):
                    self._await_idle(deadline, timeout_s)
                    self.query.stop()
                    info = checkpoint_facts(self.paths.checkpoint)
                    if info.committed:
                        report = StopReport(info.last_committed_batch, time.monotonic() - started, attempt)
                        self.store.append(
                            {"kind": "lifecycle", "stream": self.spec.name, "event": "stopped", **asdict(report)}
                        )
                        return report
                    # The stop raced a batch that had just started: finish it, still gated.
                    self.query = self.start_query()
                raise StreamStateError(
                    f"stream {self.spec.name!r}: batch {info.last_offset_batch} did not commit in {STOP_ATTEMPTS} "
                    "attempts; the query was restarted and keeps running"
                )
            finally:
                self.paths.gate.unlink(missing_ok=True)

    def _await_idle(self, deadline: float, timeout_s: float) -> None:
        """Wait until no trigger runs and every planned batch is committed (twice in a row)."""
        assert self.query is not None
        quiet_polls = 0
        while quiet_polls < 2:
            if time.monotonic() > deadline:
                raise StreamStateError(
                    f"stream {self.spec.name!r}: the running micro-batch did not commit within {timeout_s:g} s; "
                    "the stream keeps running; retry with a longer timeout"
                )
            exception = self.query.exception()
            if exception is not None:
                raise StreamStateError(f"stream {self.spec.name!r} failed: {exception}")
            idle = not self.query.status["isTriggerActive"] and checkpoint_facts(self.paths.checkpoint).committed
            quiet_polls = quiet_polls + 1 if idle else 0
            time.sleep(POLL_INTERVAL_S)

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
            new = old.with_changes(changes)
            scope = restart_scope(old, new)
            if scope is RestartScope.STATE:
                raise StreamStateError(
                    f"changing state_partitions {old.state_partitions} -> {new.state_partitions} of stateful query "
                    f"{old.query!r} moves state; run a reconfiguration with a state migration instead of a restart"
                )
            self._check_scope_allowed(scope, sorted(changes))  # before stopping: a refused change leaves it running
            if scope is RestartScope.NONE:
                return {"scope": scope.value, "stop": None, "seconds": 0.0}
            stop = self.stop_at_batch_boundary(timeout_s)
            self._reanchor(old, new)
            try:
                self.apply(new, scope)
            except Exception:
                self._reanchor(new, old)
                self.apply(old, scope)
                raise
            seconds = time.monotonic() - started
            self.store.append({"kind": "lifecycle", "stream": new.name, "event": "restarted", "scope": scope.value,
                               "changes": changes, "seconds": seconds, "spec": new.model_dump()})
            return {"scope": scope.value, "stop": asdict(stop), "seconds": seconds}

    def _check_scope_allowed(self, scope: RestartScope, what: object) -> None:
        if scope is RestartScope.SESSION and not self._owns_session:
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
        self.query = None
        self.start()

    def status(self) -> dict[str, Any]:
        """Where the stream stands: state, last batch figures, backlog, state rows."""
        with self.lock:
            progress = (self._recorder.last_progress if self._recorder else None) or (
                self.query.lastProgress if self.query is not None else None
            )
            failure = self._recorder.failure if self._recorder else None
            state = "running" if self.is_active else ("failed" if failure else "stopped")
            checkpoint = checkpoint_facts(self.paths.checkpoint)
            spark = self._spark
            return {
                "name": self.spec.name,
                "query": self.spec.query,
                "state": state,
                "failure": failure,
                "app_id": spark.sparkContext.applicationId if spark is not None else None,
                "spark_ui": spark.sparkContext.uiWebUrl if spark is not None else None,
                "master": self.spec.master,
                "run_id": str(self.query.runId) if self.query is not None else None,
                **status_figures(dict(progress) if progress else None),
                "checkpoint": checkpoint.summary(),
                "spec": self.spec.model_dump(),
            }

    def shutdown(self, timeout_s: float = 120.0) -> StopReport | None:
        """Stop the query at a batch boundary (forcibly if that fails) and the session we own."""
        with self.lock:
            report = None
            try:
                report = self.stop_at_batch_boundary(timeout_s)
            finally:
                if self.query is not None and self.query.isActive:
                    self.query.stop()
                if self._owns_session and self._spark is not None:
                    self._drop_session()
            return report
