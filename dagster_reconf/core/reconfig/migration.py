"""Reconfiguration operations on a paused stream, run where its SparkSession lives.

In a driver process these back the control endpoint (``/v1/state``, ``/v1/code-check``,
``/v1/migrate``, ``/v1/resume``); in tests and benchmarks they run in process. Every
operation refuses to touch a running query.

Two ways to change a stateful stream's state partitions:

* ``native``: Spark's offline repartition (``StreamingCheckpointManager.repartition``,
  PySpark 4.2+, RocksDB state only) rewrites the state of the last committed batch into
  a new batch N+1 of the same checkpoint. Cost grows with the state's size.
* ``replay``: a new checkpoint (the next *generation*) is built by re-running every
  batch of the old one, with the same batch boundaries, from the source's retained
  offsets (the bundled sources retain everything), into a sink that discards output
  already delivered. Works for any state store provider; cost grows with the stream's
  whole history. It is also the naive baseline the benchmark compares against.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..checkpoint import checkpoint_facts
from ..storage import remove_tree, spark_uri
from ..errors import SpecError, StreamStateError
from ..spec import SESSION_FIELDS, RestartScope, StreamSpec, restart_scope
from ..workloads.queries import get_query
from .state import schema_problems, state_schemas, state_summary

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..runtime import StreamRuntime

__all__ = ["STRATEGIES", "Strategy", "StreamMigrator", "native_repartition_available"]

Strategy = Literal["native", "replay"]
STRATEGIES: tuple[str, ...] = ("native", "replay")
PROBE_EVENTS = 500  # events the code-version probe runs through a scratch checkpoint


def native_repartition_available() -> tuple[bool, str]:
    """Whether this PySpark has the offline state repartition, and its version."""
    import pyspark
    from pyspark.sql import SparkSession

    return hasattr(SparkSession, "_streamingCheckpointManager"), pyspark.__version__


def _discard(batch: DataFrame, batch_id: int) -> None:
    """A replay's sink: run the whole plan (so state is written), keep nothing."""
    batch.write.format("noop").mode("overwrite").save()


def _end_index(offsets: list[Any]) -> int | None:
    indexes = {int(o["index"]) for o in offsets if isinstance(o, dict) and "index" in o}
    if len(indexes) > 1:
        raise StreamStateError(f"batch ended at different offsets in its sources {sorted(indexes)}: cannot replay it")
    return indexes.pop() if indexes else None


class StreamMigrator:
    """Reconfiguration operations on ``runtime``'s stream (see module docstring)."""

    def __init__(self, runtime: StreamRuntime) -> None:
        self.runtime = runtime

    @property
    def paths(self):
        return self.runtime.paths

    def _require_paused(self, what: str) -> None:
        if self.runtime.is_active:
            raise StreamStateError(f"stream {self.runtime.spec.name!r} is running: pause it before {what}")

    def state_summary(self, generation: int | None = None, batch_id: int | None = None) -> dict[str, Any]:
        """Rows and checksums of every state store (see :mod:`.state`) of a checkpoint generation."""
        checkpoint = self.paths.checkpoint_of(self.paths.generation if generation is None else generation)
        if not checkpoint.is_dir():
            raise StreamStateError(f"checkpoint {checkpoint} does not exist")
        with self.runtime.lock:
            return state_summary(self.runtime.spark, checkpoint, batch_id).to_dict()

    def check_code_version(self, code_version: str) -> dict[str, Any]:
        """Whether code version ``code_version`` can run on the checkpoint's state.

        Runs the new code over a few events into a scratch checkpoint, reads the state
        schemas it writes, and compares them with the stream's (as Spark does on restart).
        """
        spec = self.runtime.spec
        new_spec = spec.with_changes({"code_version": code_version})
        if not get_query(spec.query).stateful or not self.paths.checkpoint.is_dir():
            return {"compatible": True, "problems": [], "note": "no state to check"}
        started = time.monotonic()
        with self.runtime.lock, tempfile.TemporaryDirectory(prefix="reconf-probe-") as scratch:
            probe_spec = new_spec.with_changes({"trigger_interval_s": 0})
            query = self.runtime.start_query(
                probe_spec, checkpoint=Path(scratch) / "checkpoint", sink=_discard, name=f"{spec.name}__code_probe",
                source_overrides={"replay_ends": str(PROBE_EVENTS), "max_events_per_trigger": str(PROBE_EVENTS)},
            )
            try:
                query.processAllAvailable()
            finally:
                query.stop()
            new = state_schemas(self.runtime.spark, Path(scratch) / "checkpoint")
            stored = state_schemas(self.runtime.spark, self.paths.checkpoint)
        problems = schema_problems(stored, new)
        return {"compatible": not problems, "problems": problems, "seconds": round(time.monotonic() - started, 3)}

    def migrate(self, partitions: int, strategy: Strategy = "native") -> dict[str, Any]:
        """Move the paused stream's state to ``partitions`` partitions.

        Idempotent: a checkpoint already at ``partitions`` is left alone.

        Raises:
            SpecError: an unknown strategy.
            StreamStateError: the stream runs, its last batch is not committed, or Spark refused.
        """
        if strategy not in STRATEGIES:
            raise SpecError(f"unknown migration strategy {strategy!r}; use one of {list(STRATEGIES)}")
        self._require_paused("migrating its state")
        with self.runtime.lock:
            facts = checkpoint_facts(self.paths.checkpoint)
            if facts.state_partitions == partitions:
                return {"strategy": strategy, "skipped": True, "reason": f"checkpoint already has {partitions} partitions",
                        "generation": self.paths.generation, "batch_id": facts.last_committed_batch}
            if not facts.committed:
                raise StreamStateError(
                    f"checkpoint {self.paths.checkpoint} has batch {facts.last_offset_batch} planned but not committed; "
                    "pause the stream (which finishes the batch) before migrating"
                )
            started = time.monotonic()
            result = self._native(partitions) if strategy == "native" else self._replay(partitions)
            after = checkpoint_facts(self.paths.checkpoint)
            return {**result, "strategy": strategy, "seconds": round(time.monotonic() - started, 3),
                    "generation": self.paths.generation, "batch_id": after.last_committed_batch}

    def _native(self, partitions: int) -> dict[str, Any]:
        from py4j.protocol import Py4JJavaError

        available, version = native_repartition_available()
        if not available:
            raise StreamStateError(f"PySpark {version} has no offline state repartition (needs 4.2+, Spark Classic); "
                                   "use the replay strategy")
        try:
            self.runtime.spark._streamingCheckpointManager.repartition(spark_uri(self.paths.checkpoint), partitions)
        except Py4JJavaError as exc:
            message = str(exc.java_exception).splitlines()[0] if exc.java_exception is not None else str(exc)
            raise StreamStateError(f"Spark refused to repartition {self.paths.checkpoint}: {message}") from None
        return {}

    def _replay(self, partitions: int) -> dict[str, Any]:
        old = self.paths.checkpoint
        facts = checkpoint_facts(old, with_offsets=True)
        committed = facts.last_committed_batch if facts.last_committed_batch is not None else -1
        ends = sorted({e for b, offsets in facts.end_offsets.items() if b <= committed and (e := _end_index(offsets))})
        generation = self.paths.generation + 1
        new = self.paths.checkpoint_of(generation)
        remove_tree(new)  # what a crashed earlier attempt left
        remove_tree(self.paths.output_of(generation))
        if ends:
            replay_spec = self.runtime.spec.with_changes({"trigger_interval_s": 0, "state_partitions": partitions})
            query = self.runtime.start_query(
                replay_spec, checkpoint=new, sink=_discard, name=f"{self.runtime.spec.name}__replay",
                source_overrides={"replay_ends": ",".join(map(str, ends))},
            )
            try:
                query.processAllAvailable()
                if query.exception() is not None:
                    raise StreamStateError(f"replay failed: {query.exception()}")
            finally:
                query.stop()
        replayed = checkpoint_facts(new, with_offsets=True)
        last = replayed.end_offsets.get(replayed.last_committed_batch) if replayed.last_committed_batch is not None else None
        if ends and (not replayed.committed or _end_index(last or []) != ends[-1]):
            raise StreamStateError(f"replay into {new} stopped at {_end_index(last or [])} before offset {ends[-1]}")
        self.paths.set_generation(generation)  # the switch: from here on the stream runs on the new checkpoint
        return {"replayed_batches": len(ends), "replayed_events": ends[-1] if ends else 0, "from_generation": generation - 1}

    def rollback_replay(self, generation: int) -> dict[str, Any]:
        """Return to checkpoint generation ``generation`` and remove the newer ones (query must be paused)."""
        self._require_paused("rolling back")
        with self.runtime.lock:
            removed = []
            current = self.paths.generation
            self.paths.set_generation(generation)
            for g in range(generation + 1, max(current, generation + 1) + 1):
                for path in (self.paths.checkpoint_of(g), self.paths.output_of(g)):
                    if path.exists():
                        remove_tree(path)
                        removed.append(str(path))
            return {"generation": generation, "removed": removed}

    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Start the paused stream with ``settings`` applied (after a migration, state partitions included).

        Idempotent: a stream already running with those settings is left alone.
        """
        runtime = self.runtime
        with runtime.lock:
            old = runtime.spec
            new = old.with_changes(settings)
            if runtime.is_active:
                if new == old:
                    return {"resumed": False, "reason": "already running with these settings", "spec": new.model_dump()}
                raise StreamStateError(f"stream {old.name!r} is running with other settings; pause it before resuming "
                                       f"with {settings}")
            started = time.monotonic()
            new_session = bool({k for k in StreamSpec.model_fields if getattr(old, k) != getattr(new, k)} & SESSION_FIELDS)
            scope = RestartScope.SESSION if new_session else RestartScope.QUERY
            if restart_scope(old, new) is RestartScope.NONE:
                scope = RestartScope.QUERY
            runtime.apply(new, scope)
            return {"resumed": True, "scope": scope.value, "seconds": round(time.monotonic() - started, 3),
                    "spec": new.model_dump()}
