"""Reconfiguration operations on a paused stream, run where its SparkSession lives.

In a driver process these back the control endpoint (``/v1/state``, ``/v1/code-check``,
``/v1/migrate``, ``/v1/resume``); in tests and benchmarks they run in process. Every
operation refuses to touch a running query.

Three ways to change a stateful stream's state partitions:

* ``native``: Spark's offline repartition (``StreamingCheckpointManager.repartition``,
  PySpark 4.2+, RocksDB state only) rewrites the state of the last committed batch into
  a new batch N+1 of the same checkpoint. Cost grows with the state's size.
* ``replay``: a new checkpoint (the next *generation*) is built by re-running every
  batch of the old one from the source's retained data, with the same batch ids and
  offsets: each batch's offset-log entry is copied into the new checkpoint (with the new
  state partitions) and a once-trigger run executes exactly that planned batch, output
  discarded (the live stream delivered it). Batch ids stay, so sinks that deduplicate by
  batch id (Spark's file sink, idempotent ``foreachBatch`` writers) keep working. It needs
  every batch from 0 in the offset log and a source that still holds their data (files,
  Kafka within retention, the bundled generators); it works for any state store
  provider, and its cost grows with the stream's whole history (about a query start per
  batch). It is also the naive baseline the benchmark compares against.
* ``precopy``: prepared while the stream runs (:meth:`StreamMigrator.precopy`). The
  checkpoint is copied as of a committed batch N into the next generation (committed
  files never change), repartitioned there by Spark's offline repartition (which adds
  batch N+1 to the copy) and brought near the live stream by replaying the batches
  committed meanwhile, a bounded number of rounds, like iterative pre-copy in VM live
  migration. After the pause, :meth:`StreamMigrator.migrate` replays only the batches
  since the last round (output discarded: the live stream wrote it), so the pause does
  not repartition the state (verification still reads it). The copy's batch ids are the live ones plus one (its
  repartition
  batch); the stream goes on from there, after its last committed batch, as after a
  ``native`` migration. Where its operators allow, each round and the pause replay their
  batches as one query batch (the ids in between are left out of the copy's logs).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_reconf.core.errors import SpecError, StreamStateError
from dagster_reconf.core.spark.batch_replay import BATCH_TIMEOUT_S, next_precopy_round, replay_batches, replay_merged
from dagster_reconf.core.spark.session import native_repartition_available
from dagster_reconf.core.spark.state_reader import schema_problems, state_schemas, state_summaries
from dagster_reconf.core.spark.termination import await_termination
from dagster_reconf.core.spec import STRATEGIES, RestartScope, Strategy, StreamSpec, context_scope
from dagster_reconf.core.store.checkpoint import (
    checkpoint_facts,
    copy_checkpoint_as_of,
    copy_offset_entry,
    copy_source_logs,
    partitions_at,
    renew_query_id,
    replay_problem,
    replayable_batches,
    retained_batches,
)
from dagster_reconf.core.store.paths import remove_generations
from dagster_reconf.core.store.storage import Location, remove_tree, spark_uri

if TYPE_CHECKING:
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["StreamMigrator"]

PRECOPY_MANIFEST = "precopy.json"  # in the prepared generation: what it was copied from and how far it got
PRECOPY_ROUNDS = 3  # catch-up rounds while the stream runs
PRECOPY_CLOSE_ENOUGH = 2  # batches left for the pause: stop the rounds there
PRECOPY_MAX_PAUSE_BATCHES = 3  # more left at the pause: the native migration is the cheaper one
PRECOPY_MAX_MERGED_PAUSE_BATCHES = 12  # the same where they replay as one batch: one query start, their data


def _read_manifest(copy: Location) -> dict[str, Any] | None:
    try:
        return json.loads((copy / PRECOPY_MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _write_manifest(copy: Location, manifest: dict[str, Any]) -> None:
    (copy / PRECOPY_MANIFEST).write_text(json.dumps(manifest))


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
        """Rows and checksums of every state store (see :mod:`dagster_reconf.core.spark.state_reader`) of a checkpoint
        generation."""
        return self.state_summaries([(generation, batch_id)])[0]

    def state_summaries(self, reads: list[tuple[int | None, int | None]]) -> list[dict[str, Any]]:
        """:meth:`state_summary` of several ``(generation, batch_id)`` reads, in one Spark job (before and after)."""
        checkpoints = [self.paths.checkpoint_of(self.paths.generation if g is None else g) for g, _ in reads]
        for checkpoint in checkpoints:
            if not checkpoint.is_dir():
                raise StreamStateError(f"checkpoint {checkpoint} does not exist")
        with self.runtime.lock:
            summaries = state_summaries(
                self.runtime.spark, [(c, b) for c, (_, b) in zip(checkpoints, reads, strict=True)]
            )
            return [s.to_dict() for s in summaries]

    def check_code_version(self, code_version: str) -> dict[str, Any]:
        """Whether code version ``code_version`` can run on the checkpoint's state.

        Runs the new code over the stream's first batch (its logged offsets) into a scratch
        checkpoint, output discarded, reads the state schemas it writes, and compares them
        with the stream's (as Spark does on restart).
        """
        new_spec = self.runtime.spec.with_changes({"code_version": code_version})
        self.runtime.definition.check_code_version(code_version)
        if not checkpoint_facts(self.paths.checkpoint).stateful:
            return {"compatible": True, "problems": [], "note": "no state to check"}
        started = time.monotonic()
        with self._first_batch_probe(new_spec) as (probe, error):
            if probe is None:
                return {"compatible": True, "problems": [], "note": "no batch to probe with"}
            if error is not None:
                return {
                    "compatible": False,
                    "seconds": round(time.monotonic() - started, 3),
                    "problems": [f"the new code failed on the stream's first batch: {error}"],
                }
            new = state_schemas(self.runtime.spark, probe)
            stored = state_schemas(self.runtime.spark, self.paths.checkpoint)
        problems = schema_problems(stored, new)
        return {"compatible": not problems, "problems": problems, "seconds": round(time.monotonic() - started, 3)}

    def rehearse(self) -> dict[str, Any]:
        """Run the stream's query once over its first batch, output discarded, so that a new driver has planned it and
        its Python workers have imported the user's code and the source's reader before the stream needs them (a
        standby driver, while the stream still runs in the old one)."""
        started = time.monotonic()
        with self._first_batch_probe(self.runtime.spec) as (probe, error):
            pass
        result: dict[str, Any] = {
            "ran": probe is not None and error is None,
            "seconds": round(time.monotonic() - started, 3),
        }
        if error is not None:
            result["error"] = error
        return result

    @contextmanager
    def _first_batch_probe(self, spec: StreamSpec) -> Iterator[tuple[Path | None, str | None]]:
        """Run ``spec``'s query over the stream's first retained batch (its logged offsets) into a scratch checkpoint,
        output discarded. Yields the scratch checkpoint (None: no batch to probe with) and the first line of the
        query's error (None: it ran)."""
        facts = checkpoint_facts(self.paths.checkpoint)
        first = retained_batches(self.paths.checkpoint, facts.last_offset_batch or 0)
        if not first:
            yield None, None
            return
        with self.runtime.lock, tempfile.TemporaryDirectory(prefix="reconf-probe-") as scratch:
            probe = Path(scratch) / "checkpoint"
            copy_source_logs(self.paths.checkpoint, probe)
            copy_offset_entry(self.paths.checkpoint, probe, first[0], spec.state_partitions)
            if first[0] != 0:  # older entries purged: probe the earliest retained one as the scratch checkpoint's first
                (probe / "offsets" / str(first[0])).rename(probe / "offsets" / "0")
            query = self.runtime.start_query(spec, checkpoint=probe, purpose="probe", once=True)
            try:
                await_termination(query, BATCH_TIMEOUT_S)
            finally:
                query.stop()
            exception = query.exception()
            yield probe, (str(exception).strip().splitlines()[0] if exception is not None else None)

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
                return {
                    "strategy": strategy,
                    "skipped": True,
                    "reason": f"checkpoint already has {partitions} partitions",
                    "generation": self.paths.generation,
                    "batch_id": facts.last_committed_batch,
                }
            if not facts.committed:
                raise StreamStateError(
                    f"checkpoint {self.paths.checkpoint} has batch {facts.last_offset_batch} planned but not "
                    "committed; pause the stream (which finishes the batch) before migrating"
                )
            started = time.monotonic()
            migrate = {"native": self._native, "replay": self._replay, "precopy": self._finish_precopy}[strategy]
            result = migrate(partitions)
            after = checkpoint_facts(self.paths.checkpoint)
            return {
                **result,
                "strategy": strategy,
                "seconds": round(time.monotonic() - started, 3),
                "generation": self.paths.generation,
                "batch_id": after.last_committed_batch,
            }

    def _native(self, partitions: int) -> dict[str, Any]:
        self._repartition(self.paths.checkpoint, partitions)
        return {}

    def _repartition(self, checkpoint: Location, partitions: int) -> None:
        from py4j.protocol import Py4JJavaError

        available, version = native_repartition_available()
        if not available:
            raise StreamStateError(
                f"PySpark {version} has no offline state repartition (needs 4.2+, Spark Classic); "
                "use the replay strategy"
            )
        try:
            self.runtime.spark._streamingCheckpointManager.repartition(spark_uri(checkpoint), partitions)
        except Py4JJavaError as exc:
            message = str(exc.java_exception).splitlines()[0] if exc.java_exception is not None else str(exc)
            raise StreamStateError(f"Spark refused to repartition {checkpoint}: {message}") from None

    def precopy(self, partitions: int, close_enough: int | None = None, merge: bool = False) -> dict[str, Any]:
        """Prepare a ``precopy`` migration while the stream runs (see module docstring).

        Copies the checkpoint as of its last committed batch into the next generation,
        repartitions the copy, then replays the batches committed meanwhile into it (``replays``:
        each run, see :func:`replay_batches`), at most :data:`PRECOPY_ROUNDS` rounds, until no more
        than :data:`PRECOPY_CLOSE_ENOUGH` are left for the pause (``close_enough``: another bound, 0
        to catch up completely where the caller knows the replay outruns the stream). Where the
        replay falls behind the live stream (a round's delta grew) and a fresh copy costs less
        than replaying the delta, the copy is made again from a newer batch, once. Idempotent: a
        copy prepared earlier for the same generation and partitions, whose stream has not been
        migrated since, is caught up, not made again. ``merge``: each round (and the pause) replays its
        batches as one (:func:`~dagster_reconf.core.spark.batch_replay.replay_merged`), which the caller
        allows only for operators and state files that merge exactly.

        Raises:
            StreamStateError: nothing committed yet, the copy could not be made, or Spark refused
                the repartition or a replay.
        """
        live, generation = self.paths.checkpoint, self.paths.generation
        copy = self.paths.checkpoint_of(generation + 1)
        facts = checkpoint_facts(live)
        if facts.last_committed_batch is None or not facts.stateful:
            raise StreamStateError(f"checkpoint {live} has no committed state to copy yet; wait for the first batch")
        started = time.monotonic()
        manifest = _read_manifest(copy)
        behind = self._behind(live, manifest["caught_up_to"]) if manifest else []
        if not self._copy_usable(live, generation, partitions, manifest, behind):
            manifest = self._copy(live, copy, generation, partitions, merge)
        elif manifest.get("merge") != merge:  # the pause merges as the rounds did
            manifest["merge"] = merge
            _write_manifest(copy, manifest)
        rounds: list[int] = []
        replays: list[dict[str, Any]] = []
        recopied = False
        last_delta, per_batch_s = None, 0.0  # of this copy's last round
        for _ in range(PRECOPY_ROUNDS):
            behind = self._behind(live, manifest["caught_up_to"])
            step = next_precopy_round(
                len(behind),
                last_delta,
                per_batch_s,
                manifest["copy_s"],
                recopied,
                PRECOPY_CLOSE_ENOUGH if close_enough is None else close_enough,
                merged=merge,
            )
            if step == "stop":
                break
            if step == "recopy":
                manifest, recopied, last_delta = self._copy(live, copy, generation, partitions, merge), True, None
                replays = []  # into the copy just replaced
                continue
            round_started = time.monotonic()
            replays += self._catch_up(live, copy, behind, partitions, manifest)
            per_batch_s, last_delta = (time.monotonic() - round_started) / len(behind), len(behind)
            rounds.append(len(behind))
        left = len(self._behind(live, manifest["caught_up_to"]))
        return {
            **manifest,
            "generation": generation + 1,
            "rounds": rounds,
            "replays": replays,
            "recopied": recopied,
            "batches_left": left,
            "seconds": round(time.monotonic() - started, 3),
        }

    def _copy(self, live: Location, copy: Location, generation: int, partitions: int, merge: bool) -> dict[str, Any]:
        """A repartitioned copy of ``live`` as of its last committed batch; its manifest (``merge``: its replays run
        several batches as one)."""
        started = time.monotonic()
        remove_tree(copy)  # none, another plan's, a stale or a crashed copy: made again
        facts = checkpoint_facts(live)
        batch = facts.last_committed_batch
        try:
            counts = copy_checkpoint_as_of(live, copy, batch)
        except OSError as exc:  # a full disk, a path in the way: the live stream is untouched
            raise StreamStateError(f"could not copy {live} as of batch {batch} to {copy}: {exc}") from None
        renew_query_id(copy)  # its replays run beside the live query, which has the live id
        self._repartition(copy, partitions)
        repartitioned = checkpoint_facts(copy)
        if repartitioned.last_committed_batch != batch + 1 or repartitioned.state_partitions != partitions:
            raise StreamStateError(
                f"the repartitioned copy {copy} ended at batch {repartitioned.last_committed_batch} "
                f"with {repartitioned.state_partitions} partitions, not {batch + 1} with {partitions}"
            )
        manifest = {
            "from_generation": generation,
            "partitions": partitions,
            "live_partitions": facts.state_partitions,
            "from_batch": batch,
            "caught_up_to": batch,
            "copied_files": counts["copied"],
            "copy_s": round(time.monotonic() - started, 3),
            "merge": merge,
        }
        _write_manifest(copy, manifest)
        return manifest

    def _copy_usable(
        self, live: Location, generation: int, partitions: int, manifest: dict[str, Any] | None, behind: list[int]
    ) -> bool:
        """Whether a prepared copy can be caught up: made for this generation and partitions, and every live batch
        ``behind`` it still has the partitions it had (a native migration in place since then would not)."""
        if manifest is None or (manifest["from_generation"], manifest["partitions"]) != (generation, partitions):
            return False
        return all(partitions_at(live, b) == manifest["live_partitions"] for b in behind)

    def _behind(self, live: Location, caught_up_to: int) -> list[int]:
        last = checkpoint_facts(live).last_committed_batch
        return [b for b in retained_batches(live, last) if b > caught_up_to] if last is not None else []

    def _catch_up(
        self, live: Location, copy: Location, batches: list[int], partitions: int, manifest: dict[str, Any]
    ) -> list[dict[str, Any]]:
        spec = self.runtime.spec.with_changes({"state_partitions": partitions})
        if manifest.get("merge") and len(batches) > 1:
            runs = [replay_merged(self.runtime, live, copy, batches, spec, shift=1)]
        else:
            runs = replay_batches(self.runtime, live, copy, batches, spec, purpose="precopy", shift=1)
        manifest["caught_up_to"] = batches[-1]
        _write_manifest(copy, manifest)
        return runs

    def _finish_precopy(self, partitions: int) -> dict[str, Any]:
        """The paused half of a precopy: replay what the live stream committed since the copy's last round, switch."""
        live, generation = self.paths.checkpoint, self.paths.generation
        copy = self.paths.checkpoint_of(generation + 1)
        manifest = _read_manifest(copy)
        behind = self._behind(live, manifest["caught_up_to"]) if manifest else []
        if manifest is None or not self._copy_usable(live, generation, partitions, manifest, behind):
            raise StreamStateError(
                f"no usable copy of {live} with {partitions} state partitions was prepared; prepare "
                "one (the reconfiguration's prepare step) or use strategy 'native'"
            )
        most = PRECOPY_MAX_MERGED_PAUSE_BATCHES if manifest.get("merge") else PRECOPY_MAX_PAUSE_BATCHES
        if len(behind) > most:
            cost = "their data in one query run" if manifest.get("merge") else "a query start and the batch each"
            raise StreamStateError(
                f"the copy {copy} is {len(behind)} batches behind the paused stream; the pause replays "
                f"at most {most} ({cost})"
            )
        replays = self._catch_up(live, copy, behind, partitions, manifest) if behind else []
        paused_at = checkpoint_facts(live).last_committed_batch
        after = checkpoint_facts(copy)
        if after.last_committed_batch != paused_at + 1:
            raise StreamStateError(
                f"the copy {copy} is at batch {after.last_committed_batch}, not {paused_at + 1} (the "
                f"paused stream's {paused_at} plus its repartition batch)"
            )
        renew_query_id(copy)  # the stream goes on under an id of its own: traces never mix the replays into it
        self.paths.set_generation(generation + 1)  # the switch
        return {
            "replayed_batches": len(behind),
            "replays": replays,
            "from_generation": generation,
            "from_batch": manifest["from_batch"],
        }

    def _replay(self, partitions: int) -> dict[str, Any]:
        old = self.paths.checkpoint
        problem = replay_problem(old)
        if problem:
            raise StreamStateError(problem)
        facts = checkpoint_facts(old)
        batches = replayable_batches(old, facts.last_committed_batch) if facts.last_committed_batch is not None else []
        generation = self.paths.generation + 1
        new = self.paths.checkpoint_of(generation)
        remove_tree(new)  # what a crashed earlier attempt left
        replay_spec = self.runtime.spec.with_changes({"state_partitions": partitions})
        replay_batches(self.runtime, old, new, batches, replay_spec)
        replayed = checkpoint_facts(new)
        if batches and (not replayed.committed or replayed.last_committed_batch != batches[-1]):
            raise StreamStateError(
                f"replay into {new} stopped at batch {replayed.last_committed_batch} before {batches[-1]}"
            )
        renew_query_id(new)  # the replay's batches keep their own query id: traces never mix them into the stream's
        self.paths.set_generation(generation)  # the switch: from here on the stream runs on the new checkpoint
        return {"replayed_batches": len(batches), "from_generation": generation - 1}

    def rollback_replay(self, generation: int) -> dict[str, Any]:
        """Return to checkpoint generation ``generation`` and remove the newer ones (query must be paused)."""
        self._require_paused("rolling back")
        with self.runtime.lock:
            current = self.paths.generation
            self.paths.set_generation(generation)
            removed = remove_generations(self.paths, range(generation + 1, max(current, generation + 1) + 1))
            return {"generation": generation, "removed": removed}

    def resume(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Start the paused stream with ``settings`` applied (after a migration, state partitions included).

        Idempotent: a stream already running with those settings is left alone.
        """
        runtime = self.runtime
        with runtime.lock:
            old = runtime.spec
            new, _ = runtime.changed_spec(settings) if settings else (old, None)
            if runtime.is_active:
                if new == old:
                    return {"resumed": False, "reason": "already running with these settings", "spec": new.model_dump()}
                raise StreamStateError(
                    f"stream {old.name!r} is running with other settings; pause it before resuming with {settings}"
                )
            started = time.monotonic()
            scope = context_scope(old, new)  # the state partitions were migrated: only the context's needs are left
            scope = RestartScope.QUERY if scope is RestartScope.NONE else scope
            runtime.apply(new, scope)
            return {
                "resumed": True,
                "scope": scope.value,
                "seconds": round(time.monotonic() - started, 3),
                "spec": new.model_dump(),
            }
