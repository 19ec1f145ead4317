"""How a reconfiguration reaches a stream: in this process, or in its driver over the control endpoint.

:class:`StreamHandle` is the one interface the reconfiguration steps use.
:class:`DriverStream` talks to a supervised driver (the production path: the driver
keeps its JVM and executors warm, and a driver that died mid-reconfiguration is
started again *paused*, so the steps continue before the query runs again).
:class:`DriverStream` can also hand a change that needs a new SparkContext over to a warm
standby driver started while the stream still runs (see
:meth:`~dagster_reconf.core.process.supervisor.StreamSupervisor.start_standby`).
:class:`LocalStream` wraps a :class:`~dagster_reconf.core.spark.runtime.StreamRuntime` in
this process (tests and benchmarks).
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from dagster_reconf.core.definition import StreamDefinition, load_definition
from dagster_reconf.core.errors import ControlRequestError, ReconfError, StreamStateError
from dagster_reconf.core.kafka.lag import ConsumerLag, stream_consumer_lag
from dagster_reconf.core.spec import StreamSpec, validate_spec
from dagster_reconf.core.store.checkpoint import CheckpointSnapshot, checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths

if TYPE_CHECKING:
    from dagster_reconf.core.process.control import ControlClient
    from dagster_reconf.core.process.supervisor import StreamSupervisor
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["DriverStream", "EndpointStream", "LocalStream", "StreamHandle"]

IDLE_WAIT_S = 300.0  # the longest a re-run waits for a killed run's request to end in the driver (a migration's)
IDLE_POLL_S = 0.5


class StreamHandle(ABC):
    """A managed stream as the reconfiguration steps see it."""

    paths: StreamPaths

    @property
    def name(self) -> str:
        return self.paths.name

    @abstractmethod
    def spec(self) -> StreamSpec:
        """The settings in force."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """The runtime's status (``state``: running, stopped, failed, or not running without a driver)."""

    @abstractmethod
    def ensure_driver(self) -> None:
        """Make sure something can run Spark operations for the stream (a paused driver if it died)."""

    @abstractmethod
    def ensure_running(self) -> dict[str, Any]:
        """Make sure the stream's query runs with the settings in force."""

    def await_idle(self, timeout_s: float = IDLE_WAIT_S) -> float:
        """Wait until no control operation runs in the stream's driver (a killed run's request still does); the
        seconds waited.

        Raises:
            StreamStateError: one still runs after ``timeout_s``.
        """
        started = time.monotonic()
        while True:
            try:
                status = self.status()
            except ReconfError:
                return time.monotonic() - started  # no driver answers: nothing runs in one
            running = status.get("operation_in_flight")
            if running is None:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise StreamStateError(
                    f"stream {self.name!r}: its driver still runs {running} (for {status.get('operation_in_flight_s')}"
                    f" s), a request of a run that was stopped; re-run once it has ended"
                )
            time.sleep(IDLE_POLL_S)

    def restart_lost_driver(self) -> dict[str, Any]:
        """Start the stream's driver again if it is gone (a kill, a lost host); never restarts a query that failed
        (that is for the health gate to judge). What it did, for the journal."""
        return {"started": False}

    def driver_death(self) -> dict[str, Any] | None:
        """How the stream's driver died while its record says it runs (pid, last seen); None: it did not."""
        return None

    def metrics(self) -> MetricsStore:
        """The stream's metrics store as this host reads it (a remote driver's: this host's copy, pulled on read)."""
        return MetricsStore(self.paths.metrics)

    def kafka_lag(self) -> ConsumerLag | None:
        """The consumer lag of the stream's Kafka sources, from its checkpoint and the brokers the spec's ``kafka``
        names (None: no ``kafka`` access in the spec, no Kafka source, or no batch committed yet).

        Raises:
            SourceAccessError: the brokers did not answer, or a topic is gone.
        """
        access = self.spec().kafka
        if access is None:
            return None
        record = self.metrics().last_progress()
        return stream_consumer_lag(self.paths.checkpoint, (record or {}).get("progress"), access)

    @abstractmethod
    def pause(self, timeout_s: float, finish: bool = True, keep_interrupted: bool = False) -> dict[str, Any]:
        """Stop at a micro-batch boundary; the last batch is committed when this returns (with ``finish``; without,
        an interrupted batch stays planned for the next driver to finish, or, where no sink saw it, is dropped unless
        ``keep_interrupted``)."""

    @abstractmethod
    def state(self, generation: int | None = None, batch_id: int | None = None) -> dict[str, Any]:
        """State summary (:class:`~dagster_reconf.core.spark.state_reader.StateSummary` as a dict)."""

    @abstractmethod
    def states(self, reads: list[tuple[int | None, int | None]]) -> list[dict[str, Any]]:
        """State summaries of several ``(generation, batch_id)`` reads, in one Spark job."""

    @abstractmethod
    def code_check(self, code_version: str) -> dict[str, Any]:
        """State schema compatibility of a code version."""

    @abstractmethod
    def migrate(self, state_partitions: int, strategy: str) -> dict[str, Any]:
        """Move the paused stream's state to ``state_partitions``."""

    @abstractmethod
    def precopy(self, state_partitions: int, close_enough: int | None = None, merge: bool = False) -> dict[str, Any]:
        """Prepare a repartitioned copy of the running stream's checkpoint (the ``precopy`` strategy); its rounds stop
        ``close_enough`` batches behind the stream (default
        :data:`~dagster_reconf.core.spark.state_migrator.PRECOPY_CLOSE_ENOUGH`); ``merge``: each round replays its
        batches as one."""

    @abstractmethod
    def add_executors(self, count: int) -> dict[str, Any]:
        """Grow the running stream to ``count`` executors (within its spec's ``cores_ceiling``)."""

    @abstractmethod
    def rollback_replay(self, generation: int) -> dict[str, Any]:
        """Return to checkpoint generation ``generation``."""

    @abstractmethod
    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Start the paused query with ``settings``."""

    @abstractmethod
    def definition(self) -> StreamDefinition:
        """The user's stream definition (its options model, code versions, capabilities)."""

    def validate(self, spec: StreamSpec) -> None:
        """Raise :class:`~dagster_reconf.core.errors.SpecError` if the definition cannot run ``spec``."""
        validate_spec(spec, self.definition())

    # A change that needs a new SparkContext can be handed over to a warm standby driver; only a
    # stream in its own driver process can (in this process there is one SparkContext at a time).
    supports_handover = False

    def prepare_standby(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Start a warm standby driver with ``changes`` (session settings) while the stream runs."""
        raise StreamStateError(f"stream {self.name!r} runs in this process: it cannot hand over to a standby driver")

    def hand_over(self, standby_pid: int, timeout_s: float) -> dict[str, Any]:
        """Make standby ``standby_pid`` the stream's driver (the stream is paused); the old driver exits."""
        raise StreamStateError(f"stream {self.name!r} runs in this process: it cannot hand over to a standby driver")

    def clean_up_drivers(self) -> list[int]:
        """Stop a standby that was not promoted and an old driver still exiting after a handover; their pids."""
        return []

    def release_pause(self) -> None:
        """The reconfiguration that paused the stream has ended: nothing it left may hold a driver started later
        paused (a remote driver's pause marker). Idempotent."""


class LocalStream(StreamHandle):
    """A stream run by a :class:`StreamRuntime` in this process."""

    def __init__(self, runtime: StreamRuntime) -> None:
        from dagster_reconf.core.spark.state_migrator import StreamMigrator

        self.runtime = runtime
        self.paths = runtime.paths
        self.migrator = StreamMigrator(runtime)

    def spec(self) -> StreamSpec:
        return self.runtime.spec

    def status(self) -> dict[str, Any]:
        return self.runtime.status()

    def ensure_driver(self) -> None:
        """The runtime is this process: nothing to start."""

    def ensure_running(self) -> dict[str, Any]:
        if not self.runtime.is_active:
            self.runtime.start()
            return {"started": True}
        return {"started": False}

    def pause(self, timeout_s: float, finish: bool = True, keep_interrupted: bool = False) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self.runtime.stop_at_batch_boundary(timeout_s, finish=finish, keep_interrupted=keep_interrupted))

    def state(self, generation: int | None = None, batch_id: int | None = None) -> dict[str, Any]:
        return self.migrator.state_summary(generation, batch_id)

    def states(self, reads: list[tuple[int | None, int | None]]) -> list[dict[str, Any]]:
        return self.migrator.state_summaries(reads)

    def code_check(self, code_version: str) -> dict[str, Any]:
        return self.migrator.check_code_version(code_version)

    def migrate(self, state_partitions: int, strategy: str) -> dict[str, Any]:
        return self.migrator.migrate(state_partitions, strategy)  # type: ignore[arg-type]

    def precopy(self, state_partitions: int, close_enough: int | None = None, merge: bool = False) -> dict[str, Any]:
        return self.migrator.precopy(state_partitions, close_enough, merge)

    def add_executors(self, count: int) -> dict[str, Any]:
        return self.runtime.add_executors(count)

    def rollback_replay(self, generation: int) -> dict[str, Any]:
        return self.migrator.rollback_replay(generation)

    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        return self.migrator.resume(settings)

    def definition(self) -> StreamDefinition:
        return self.runtime.definition


class EndpointStream(StreamHandle):
    """A stream whose Spark operations run in a driver process, over its control endpoint (:meth:`_client`)."""

    @abstractmethod
    def _client(self) -> ControlClient:
        """A client for the driver's control endpoint."""

    def state(self, generation: int | None = None, batch_id: int | None = None) -> dict[str, Any]:
        return self._client().state(generation, batch_id)

    def states(self, reads: list[tuple[int | None, int | None]]) -> list[dict[str, Any]]:
        try:
            return self._client().states(reads)
        except ControlRequestError as exc:
            if exc.status != 404:
                raise
            return [self._client().state(g, b) for g, b in reads]  # a driver of an older release: one read at a time

    def code_check(self, code_version: str) -> dict[str, Any]:
        return self._client().code_check(code_version)

    def migrate(self, state_partitions: int, strategy: str) -> dict[str, Any]:
        return self._client().migrate(state_partitions, strategy)

    def precopy(self, state_partitions: int, close_enough: int | None = None, merge: bool = False) -> dict[str, Any]:
        return self._client().precopy(state_partitions, close_enough, merge)

    def add_executors(self, count: int) -> dict[str, Any]:
        return self._client().add_executors(count)

    def rollback_replay(self, generation: int) -> dict[str, Any]:
        return self._client().rollback_replay(generation)

    def definition(self) -> StreamDefinition:
        return load_definition(self.spec().entrypoint)


class DriverStream(EndpointStream):
    """A stream run by its own driver process under ``supervisor``."""

    def __init__(self, supervisor: StreamSupervisor, name: str) -> None:
        self.supervisor = supervisor
        self.paths = supervisor.paths(name)
        supervisor.require(name)  # unknown stream: StreamNotFoundError naming the known ones

    def spec(self) -> StreamSpec:
        return StreamSpec.parse(json.loads(self.paths.spec.read_text()))

    def status(self) -> dict[str, Any]:
        return self.supervisor.status(self.name)

    def _client(self) -> ControlClient:
        return self.supervisor.client(self.name)

    def ensure_driver(self) -> None:
        if self.supervisor.driver_info(self.name) is None:
            self.supervisor.start(self.spec(), paused=True)

    def restart_lost_driver(self) -> dict[str, Any]:
        if self.supervisor.driver_info(self.name) is None:
            self.supervisor.start(self.spec())
            return {"started": True, "driver": "new"}
        return {"started": False}

    def driver_death(self) -> dict[str, Any] | None:
        return self.supervisor.driver_death(self.name)

    def ensure_running(self) -> dict[str, Any]:
        if self.supervisor.driver_info(self.name) is None:
            self.supervisor.start(self.spec())
            return {"started": True, "driver": "new"}
        if self.status().get("state") != "running":
            self._client().start()
            return {"started": True, "driver": "kept"}
        return {"started": False}

    def pause(self, timeout_s: float, finish: bool = True, keep_interrupted: bool = False) -> dict[str, Any]:
        try:
            return self._client().stop(timeout_s, finish, keep_interrupted)
        except ControlRequestError as exc:
            if finish or exc.status != 400:
                raise
            return self._client().stop(timeout_s)  # a driver of an older release: it finishes the batch itself

    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        if self.supervisor.driver_info(self.name) is None:
            raise StreamStateError(f"stream {self.name!r} has no driver to resume in")
        return self._client().resume(settings)

    supports_handover = True

    def prepare_standby(self, changes: dict[str, Any]) -> dict[str, Any]:
        return self.supervisor.start_standby(self.name, changes)

    def hand_over(self, standby_pid: int, timeout_s: float) -> dict[str, Any]:
        return self.supervisor.hand_over(self.name, standby_pid, timeout_s)

    def clean_up_drivers(self) -> list[int]:
        return self.supervisor.clean_up_drivers(self.name)


def migrate_natively(
    stream: StreamHandle,
    snapshot: CheckpointSnapshot,
    partitions: int,
    batch_id: int | None,
    generation: int,
    fell_back: str | None = None,
) -> dict[str, Any]:
    """The native migration of the paused ``stream`` to ``partitions``, after a restorable ``snapshot`` of its
    checkpoint at ``batch_id``. Idempotent: one that ended before an interruption is not run again; one that was
    interrupted is restored to the paused batch first (``fell_back``: why a precopy came this way)."""
    checkpoint = stream.paths.checkpoint
    restored = None
    if snapshot.exists and snapshot.manifest()["batch_id"] == batch_id:
        facts = checkpoint_facts(checkpoint)
        if facts.state_partitions == partitions and facts.committed:
            return {
                "strategy": "native",
                "skipped": True,
                "reason": "migrated before an interruption",
                "batch_id": facts.last_committed_batch,
                "generation": generation,
            }
        restored = snapshot.restore()  # an interrupted attempt: back to the paused batch, then again
    else:
        snapshot.take(checkpoint, batch_id)
    result = stream.migrate(partitions, "native")
    if fell_back is not None:
        result["fell_back"] = f"native: {fell_back}"
    return {**result, "snapshot": str(snapshot.directory), "restored_partial_attempt": restored}


def finish_interrupted(stream: StreamHandle, report: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Finish, in the driver now in charge, a batch the old driver's stop left planned (``report``: that stop's)."""
    try:
        finished = stream.pause(timeout_s)
    except ReconfError as exc:  # once more, with the retired driver gone (not still exiting beside it)
        stream.clean_up_drivers()
        stream.ensure_driver()
        finished = {**stream.pause(timeout_s), "first_attempt_failed": str(exc)}
    report = {
        **report,
        "last_committed_batch": finished["last_committed_batch"],
        "finished_batch": finished.get("finished_batch"),
        "seconds": round(report["seconds"] + finished["seconds"], 3),
    }
    if "first_attempt_failed" in finished:
        report["first_attempt_failed"] = finished["first_attempt_failed"]
    return report
