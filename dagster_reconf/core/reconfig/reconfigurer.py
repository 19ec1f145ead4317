"""Carry out an execution plan on a running stream, step by step, journaled in the audit ledger.

preflight -> prepare -> pause -> migrate -> verify -> resume -> observe -> record

* **preflight** checks everything before anything is touched (:mod:`~dagster_reconf.core.reconfig.preflight`);
  a refusal lists every problem with its fix and changes nothing.
* **prepare** does what can be done while the stream still runs: reads the state (and loads its readers), adds the
  executors a cores change within the ceiling needs, starts a warm standby driver for a new SparkContext, prepares a
  precopy (:mod:`~dagster_reconf.core.reconfig.precopy`).
* **pause** stops only this stream's query at a batch boundary; with a standby, the standby takes over.
* **migrate** moves the state (native, replay, precopy), after a restorable snapshot of the checkpoint.
* **verify** compares the state before and after; a difference restores the checkpoint and resumes the stream as it
  was: it ends fully reconfigured or fully as it was.
* **resume**, **observe** (downtime, catch-up, event latency), **record** (the whole story in the ledger).

Crash safety: each step is journaled before and after it runs, and each is idempotent; a re-run of the same plan
continues after the last step that ended (:mod:`~dagster_reconf.core.reconfig.admission`), a driver that died is
started again paused. One reconfiguration per stream, one process running its steps: the ledger's lock and lease
(:mod:`~dagster_reconf.core.ledger.locks`). ``docs/reconfiguration.md`` says each step in full.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dagster_reconf.core.errors import (
    ReconfError,
    ReconfigurationInterrupted,
    ReconfigurationRefused,
    SpecError,
    StreamStateError,
    summary_line,
)
from dagster_reconf.core.ledger import AuditLedger
from dagster_reconf.core.ledger.locks import this_process
from dagster_reconf.core.progress.lifecycle import Paused
from dagster_reconf.core.reconfig.admission import admit
from dagster_reconf.core.reconfig.handles import StreamHandle, finish_interrupted, migrate_natively
from dagster_reconf.core.reconfig.health import watch_resumed
from dagster_reconf.core.reconfig.incidents import record_stream_incidents
from dagster_reconf.core.reconfig.observe import recent_backlog
from dagster_reconf.core.reconfig.pause_point import await_batch_boundary
from dagster_reconf.core.reconfig.plan import ExecutionPlan
from dagster_reconf.core.reconfig.precopy import prepare_precopy
from dagster_reconf.core.reconfig.preflight import preflight
from dagster_reconf.core.reconfig.reconfiguration import Reconfiguration, executors_to_add
from dagster_reconf.core.reconfig.step_results import PrepareResult
from dagster_reconf.core.reconfig.verification import precopy_delta, verify_migration, warm_up_verification
from dagster_reconf.core.spark.state_reader import StateSummary
from dagster_reconf.core.spec import STRATEGIES
from dagster_reconf.core.store.checkpoint import CheckpointSnapshot
from dagster_reconf.core.store.paths import remove_generations
from dagster_reconf.core.store.storage import spark_uri

# A plan to apply: an ExecutionPlan, its dict, or its JSON. Notes: who asked (trigger) and why (evidence), journaled.
PlanInput = ExecutionPlan | dict[str, Any] | str
Notes = dict[str, Any] | None

__all__ = ["PAUSED_STEPS", "STEPS", "Reconfigurer"]

STEPS = ("preflight", "prepare", "pause", "migrate", "verify", "resume", "observe", "record")
BEFORE_PAUSE = STEPS[: STEPS.index("pause")]
# The steps while the stream is stopped: a caller that runs steps one at a time (a Dagster op each) runs these back to
# back, since any time it spends between them is the stream's downtime.
PAUSED_STEPS = ("pause", "migrate", "verify", "resume")
# How far back the metrics store is read: the batches before a pause (their backlog and pace), the live batches a
# precopy's replays are checked against, and the batches since a pause until the stream caught up.
HISTORY_TAIL_BYTES = 1 << 20
OBSERVED_TAIL_BYTES = 4 << 20


class Reconfigurer:
    """Runs reconfigurations of one stream (see module docstring).

    Args:
        stream: how to reach the stream (:class:`~dagster_reconf.core.reconfig.handles.DriverStream` or
        :class:`~dagster_reconf.core.reconfig.handles.LocalStream`).
        ledger: the audit ledger (journal, lock, final record).
        strategy: how state moves: ``native`` (Spark's offline repartition), ``replay``, or ``precopy``
            (a repartitioned copy prepared while the stream runs; the pause replays only the batches since).
        holder: who runs it (a Dagster run id, a user); default ``host:pid``.
        pause_timeout_s: how long to wait for the running micro-batch to commit.
        observe_timeout_s: how long to watch the stream catch up after resuming.
        after_step: called with each step's name after its end is journaled (tests inject faults here).
        handover: hand changes that need a new SparkContext over to a warm standby driver where the
            stream can (its own driver process); False restarts the SparkContext in the paused driver.
        lease_owner: who runs the steps, for the lease: default this thread of this process, given back after each
            step; a name (a Dagster run's) keeps the lease between steps run by different processes of that owner.
    """

    def __init__(
        self,
        stream: StreamHandle,
        ledger: AuditLedger,
        *,
        strategy: str = "native",
        holder: str | None = None,
        pause_timeout_s: float = 120.0,
        observe_timeout_s: float = 60.0,
        after_step: Callable[[str], None] | None = None,
        handover: bool = True,
        lease_owner: str | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise SpecError(f"unknown migration strategy {strategy!r}; use one of {list(STRATEGIES)}")
        self.stream = stream
        self.ledger = ledger
        self.strategy = strategy
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._holding: str | None = None  # the reconfiguration whose lease this reconfigurer holds
        self.pause_timeout_s = pause_timeout_s
        self.observe_timeout_s = observe_timeout_s
        self.after_step = after_step
        self.handover = handover
        self.lease_owner = lease_owner
        self._steps: dict[str, Callable[[Reconfiguration], dict[str, Any]]] = {n: getattr(self, f"_{n}") for n in STEPS}

    # -- the whole thing ------------------------------------------------------------------------

    def run(self, target: PlanInput, *, trigger: Notes = None, evidence: Notes = None) -> Reconfiguration:
        """Begin (or continue) the reconfiguration to ``target`` and run every step that has not ended."""
        reconfiguration = self.begin(target, trigger=trigger, evidence=evidence)
        with self.holding(reconfiguration):
            for name in STEPS:
                self.step(reconfiguration, name)
        return reconfiguration

    @contextmanager
    def holding(self, reconfiguration: Reconfiguration) -> Iterator[None]:
        """Hold the reconfiguration's lease across the steps run in the block (no other run can slip in between
        them); without it, each step takes and gives back the lease itself.

        Raises:
            ReconfigurationRefused: another process runs its steps.
        """
        if reconfiguration.finished or self._holding == reconfiguration.id:
            yield
            return
        owner = self.lease_owner or this_process()
        with self.ledger.locks.leased(
            reconfiguration.stream, reconfiguration.id, owner, keep=self.lease_owner is not None
        ):
            self._holding = reconfiguration.id
            try:
                yield
            finally:
                self._holding = None

    def begin(self, target: PlanInput, *, trigger: Notes = None, evidence: Notes = None) -> Reconfiguration:
        """Take the stream for a new reconfiguration to ``target``, or continue the unfinished one of the same plan
        (see :func:`~dagster_reconf.core.reconfig.admission.admit`).

        Raises:
            ReconfigurationRefused: the plan is invalid for the stream, or another plan holds the stream.
        """
        record_stream_incidents(self.ledger, self.stream)  # what happened since the ledger last heard
        return admit(
            self.stream,
            self.ledger,
            target,
            strategy=self.strategy,
            holder=self.holder,
            owner=self.lease_owner,
            trigger=trigger,
            evidence=evidence,
        )

    def abort(self) -> Reconfiguration | None:
        """Roll back the stream's unfinished reconfiguration (None if there is none).

        Raises:
            ReconfigurationRefused: it already resumed the stream with the new plan (re-run it to finish instead).
        """
        lock = self.ledger.lock(self.stream.name)
        if lock is None:
            return None
        held = lock.lease_holder(self.lease_owner or this_process())
        if held is not None:
            raise ReconfigurationRefused(
                self.stream.name,
                [f"reconfiguration {lock.reconfiguration_id} is running a step in {held}; abort it once that ends"],
            )
        reconfiguration = Reconfiguration.from_ledger(self.ledger, lock.reconfiguration_id)
        if "resume" in reconfiguration.results:
            raise ReconfigurationRefused(
                self.stream.name,
                [
                    f"reconfiguration {reconfiguration.id} already resumed the stream with plan "
                    f"{reconfiguration.plan_hash}; re-run that plan to finish it, then reconfigure back if needed"
                ],
            )
        self._rollback(reconfiguration, f"aborted by {self.holder}")
        return reconfiguration

    def step(self, reconfiguration: Reconfiguration, name: str) -> dict[str, Any]:
        """Run step ``name`` unless it already ended (then return its journaled result).

        Raises:
            ReconfigurationRefused: preflight found problems (nothing was changed; the lock is released).
            ReconfigurationInterrupted: the step failed; re-run the same plan to finish.
        """
        if name not in STEPS:
            raise SpecError(f"unknown reconfiguration step {name!r}; steps: {', '.join(STEPS)}")
        if reconfiguration.finished:
            return {"skipped": f"reconfiguration {reconfiguration.outcome}"}
        if name in reconfiguration.results:
            return reconfiguration.results[name]
        missing = [s for s in STEPS[: STEPS.index(name)] if s not in reconfiguration.results]
        if missing:
            raise ReconfigurationInterrupted(
                f"step {name} of reconfiguration {reconfiguration.id} needs {missing} first"
            )
        with self.holding(reconfiguration):  # or refused: another process runs a step
            return self._run_step(reconfiguration, name)

    def _run_step(self, reconfiguration: Reconfiguration, name: str) -> dict[str, Any]:
        stream, rid = reconfiguration.stream, reconfiguration.id
        self.ledger.append(
            stream=stream, kind="step.begin", step=name, reconfiguration_id=rid, payload={"holder": self.holder}
        )
        started = time.monotonic()
        try:
            result = self._steps[name](reconfiguration)
        except ReconfigurationRefused as exc:
            self.ledger.append(
                stream=stream, kind="step.failed", step=name, reconfiguration_id=rid, payload={"error": str(exc)}
            )
            details = {"problems": exc.problems, **({"details": exc.details} if exc.details != exc.problems else {})}
            self._finish(reconfiguration, "refused", details)
            raise
        except Exception as exc:
            self.ledger.append(
                stream=stream,
                kind="step.failed",
                step=name,
                reconfiguration_id=rid,
                payload={"error": f"{type(exc).__name__}: {exc}"},
            )
            if name in BEFORE_PAUSE:  # nothing stopped or changed: nothing to finish, and the stream is free
                self._finish(reconfiguration, "failed_before_pause", {"reason": f"{name}: {summary_line(str(exc))}"})
                return {"failed": summary_line(str(exc))}
            raise ReconfigurationInterrupted(
                f"step {name} of reconfiguration {rid} of stream {stream!r} failed: {exc}. Nothing is lost: re-run the "
                f"same plan to finish it, or `reconf reconfigure abort {stream}` to roll it back"
            ) from exc
        seconds = round(time.monotonic() - started, 3)
        self.ledger.append(
            stream=stream,
            kind="step.end",
            step=name,
            reconfiguration_id=rid,
            payload={"seconds": seconds, "result": result},
        )
        reconfiguration.results[name], reconfiguration.timings[name] = result, seconds
        if self.after_step is not None:
            self.after_step(name)
        return result

    def _finish(self, reconfiguration: Reconfiguration, outcome: str, details: dict[str, Any]) -> None:
        reconfiguration.outcome, reconfiguration.reason = outcome, details.get("reason")
        payload = {
            **reconfiguration.started_payload(),
            "outcome": outcome,
            "steps": reconfiguration.results,
            "timings": reconfiguration.timings,
            **details,
        }
        self.ledger.append(
            stream=reconfiguration.stream,
            kind="reconfiguration.finished",
            reconfiguration_id=reconfiguration.id,
            payload=payload,
        )
        CheckpointSnapshot(self._snapshot_dir(reconfiguration)).discard()
        self.stream.clean_up_drivers()  # a standby left unused, the old driver after a handover
        self.stream.release_pause()  # its resume cleared it; a marker left by a failed clear never outlives the lock
        self.ledger.release_lock(reconfiguration.stream, reconfiguration.id)

    def _remove_older_generations(self) -> list[str]:
        """Remove the checkpoints of generations before the one in force (a replay or precopy leaves its source): full
        copies of the state, once no rollback can need them. Idempotent: a re-run finds them gone."""
        return remove_generations(self.stream.paths, range(self.stream.paths.generation))

    def _snapshot_dir(self, reconfiguration: Reconfiguration):
        return self.stream.paths.reconfigurations / reconfiguration.id / "snapshot"

    # -- steps ------------------------------------------------------------------------------

    def _preflight(self, r: Reconfiguration) -> dict[str, Any]:
        problems, checks = preflight(r, self.stream)
        if problems:
            raise ReconfigurationRefused(r.stream, problems)
        return {"checks": checks, "actions": r.actions}

    def _prepare(self, r: Reconfiguration) -> dict[str, Any]:
        records, _ = self.stream.metrics().tail(HISTORY_TAIL_BYTES)
        history = recent_backlog(records, self.stream.spec().trigger_interval_s)
        baseline = executors = precopy = None
        standby: dict[str, Any] = {}
        if r.needs_migration:
            self.stream.ensure_driver()  # a driver that died after preflight comes back paused
            baseline = self.stream.state()  # the state's size, and the state readers loaded
            warm_up_verification()  # GX's cold start would otherwise fall inside the pause
        grow = executors_to_add(r)
        if grow:  # Trisk's warm executors: the new configuration's JVMs start while the stream runs, not in the pause
            try:
                executors = self.stream.add_executors(grow)
            except ReconfError as exc:  # nothing is paused yet: the stream runs on as it was
                raise ReconfigurationRefused(
                    r.stream, [f"the executors of this cores change did not come: {exc}"]
                ) from exc
        if r.needs_new_context and self.handover and self.stream.supports_handover:
            try:
                standby = self.stream.prepare_standby(r.standby_changes)
            except ReconfError as exc:  # the old driver restarts its SparkContext instead, as without a standby
                standby = {"failed": str(exc)}
        if r.needs_migration and r.strategy == "precopy":  # last: its rounds end as close to the pause as can be
            try:
                precopy = prepare_precopy(self.stream, r.target.partitioning.state_partition_count, history)
            except ReconfError as exc:  # the migration runs the native way in the pause instead, and says so
                precopy = {"failed": str(exc)}
        prepared = PrepareResult(history, r.target.settings(), baseline, executors, standby, precopy)
        return prepared.to_record()

    def _pause(self, r: Reconfiguration) -> dict[str, Any]:
        self.stream.ensure_driver()
        batch_s = r.prepared.history.batch_s  # the stream runs while it waits (pause_point): not downtime
        waited_s = await_batch_boundary(self.stream.paths.checkpoint, batch_s) if r.pause_lets_batch_commit else 0.0
        paused_at = time.time()
        standby_pid = r.prepared.standby_pid
        # Where no state moves and the code stays, a batch the stop interrupts stays planned: the resume runs it first,
        # at the old cap, with the new settings (a re-planned one would be a whole catch-up batch of the new cap, and
        # the downtime ends at its commit). Otherwise the standby, or this driver, finishes it first.
        keep = r.keeps_interrupted_batch
        report = self.stream.pause(self.pause_timeout_s, finish=standby_pid is None and not keep, keep_interrupted=keep)
        self._record_lead(r, waited_s)
        handover = None
        if standby_pid is not None:
            try:
                handover = self.stream.hand_over(standby_pid, self.pause_timeout_s)
            except ReconfError as exc:  # the standby died: carry on in a driver of the old settings
                handover = {"failed": str(exc)}
                self.stream.clean_up_drivers()
            self.stream.ensure_driver()
            if not keep:
                report = finish_interrupted(self.stream, report, self.pause_timeout_s)
        if keep:
            report["interrupted_batch_kept"] = report.get("attempts") == 2
        result = {
            **report,
            "paused_at": paused_at,
            "boundary_wait_s": waited_s,
            "generation": self.stream.paths.generation,
            "batch_id": report.get("last_committed_batch"),
        }
        if handover is not None:
            result["handover"] = handover
        return result

    def _record_lead(self, r: Reconfiguration, waited_s: float) -> None:
        """Tell the stream's metrics how long this reconfiguration ran before its pause (the steps before it and the
        pause's wait): the backlog moved at the old settings that long, which a policy weighs before asking again."""
        lead_s = sum(r.timings.get(step, 0.0) for step in STEPS[: STEPS.index("pause")]) + waited_s
        paused = Paused(stream=self.stream.name, reconfiguration_id=r.id, lead_s=round(lead_s, 3))
        self.stream.metrics().append(paused.to_record())

    def _migrate(self, r: Reconfiguration) -> dict[str, Any]:
        if not r.needs_migration:
            return {"skipped": "no state migration in this plan"}
        self.stream.ensure_driver()
        partitions = r.target.partitioning.state_partition_count
        paused = r.paused
        fell_back = None
        if r.strategy == "precopy":
            prepared = r.prepared.precopy or {"failed": "not prepared"}
            try:
                if "failed" in prepared:
                    raise StreamStateError(prepared["failed"])
                return self.stream.migrate(partitions, "precopy")
            except ReconfError as exc:  # not prepared, too far behind, no usable copy: the native way, the copy removed
                fell_back = str(exc)
                self.stream.rollback_replay(paused.generation)
        if r.strategy in ("native", "precopy"):  # a precopy that could not be prepared or finished falls back to native
            snapshot = CheckpointSnapshot(self._snapshot_dir(r))
            return migrate_natively(self.stream, snapshot, partitions, paused.batch_id, paused.generation, fell_back)
        return self.stream.migrate(partitions, "replay")

    def _verify(self, r: Reconfiguration) -> dict[str, Any]:
        if r.rolling_back:
            return self._rollback(r, "an interrupted rollback was finished")
        if not r.needs_migration:
            return {"skipped": "no state migration in this plan"}
        self.stream.ensure_driver()
        paused, migrated = r.paused, r.migrated
        if r.strategy == "precopy":
            delta = precopy_delta(r.prepared.precopy or {}, migrated, paused.batch_id, self._metrics_tail)
            if delta is not None:
                if not delta["ok"]:
                    reason = "verification failed: " + "; ".join(delta["problems"])
                    delta["rolled_back"] = self._rollback(r, reason)
                return delta
        baseline = r.prepared.baseline
        old_checkpoint = spark_uri(self.stream.paths.checkpoint_of(paused.generation))
        if baseline and baseline["batch_id"] == paused.batch_id and baseline["checkpoint"] == old_checkpoint:
            before = StateSummary.from_dict(baseline)  # nothing ran between prepare and pause: no need to read it again
            after = StateSummary.from_dict(self.stream.state())
        else:  # both in one Spark job: the pause pays a job's fixed costs once
            before, after = map(
                StateSummary.from_dict, self.stream.states([(paused.generation, paused.batch_id), (None, None)])
            )
        verification = verify_migration(before, after, r.target.partitioning.state_partition_count)
        result = {**verification.as_dict(), "before_batch": paused.batch_id, "after_batch": migrated.batch_id}
        if not verification.ok:
            result["rolled_back"] = self._rollback(
                r, "verification failed: " + "; ".join(verification.problems or verification.gx.failures)
            )
        return result

    def _metrics_tail(self) -> list[dict[str, Any]]:
        return self.stream.metrics().tail(OBSERVED_TAIL_BYTES)[0]

    def _rollback(self, r: Reconfiguration, reason: str, *, after_resume: bool = False) -> dict[str, Any]:
        """Return the checkpoint to the paused batch and resume the stream as it was; finish as rolled back
        (``after_resume``: the resumed stream failed the health gate, so it is stopped first and every setting goes
        back; the outcome is ``failed_after_resume``)."""
        payload = {"reason": reason, "after_resume": after_resume}
        self.ledger.append(stream=r.stream, kind="rollback.begin", reconfiguration_id=r.id, payload=payload)
        r.rolling_back = True
        self.stream.ensure_driver()
        if after_resume:  # the new query's batches are dropped with the checkpoint's return: none is finished here
            self.stream.pause(self.pause_timeout_s, finish=False)
        paused = r.paused if "pause" in r.results else None
        undone: dict[str, Any] = {}
        if paused is not None:
            snapshot = CheckpointSnapshot(self._snapshot_dir(r))
            if r.strategy in ("native", "precopy") and snapshot.exists:  # a native migration (a precopy's fallback)
                undone = snapshot.restore()
            if r.strategy in ("replay", "precopy"):  # back to the paused generation; the newer one is removed
                undone.update(self.stream.rollback_replay(paused.generation))
        # Idempotent: a stream never paused keeps running. A standby that took over has the new settings
        # (all but the state partitions and code version): it goes back to the old ones.
        before = {a["knob"]: a["before"] for a in r.actions if after_resume or a["knob"] in r.standby_changes}
        undone["resume"] = self.stream.resume(before if r.handed_over or after_resume else {})
        self._finish(r, "failed_after_resume" if after_resume else "rolled_back", {"reason": reason, "undone": undone})
        return {"reason": reason, **undone}

    def _resume(self, r: Reconfiguration) -> dict[str, Any]:
        self.stream.ensure_driver()
        result = self.stream.resume(r.settings_changes)
        return {**result, "resumed_at": time.time()}

    def _observe(self, r: Reconfiguration) -> dict[str, Any]:
        """Watch the resumed stream catch up, through the health gate (:mod:`~dagster_reconf.core.reconfig.health`):
        a stream that fails it is rolled back, and the reconfiguration ends ``failed_after_resume``."""
        if r.rolling_back:
            return self._rollback(r, "an interrupted rollback was finished", after_resume=True)
        started = self.stream.restart_lost_driver()  # a driver killed after the resume (its query never restarts)
        observation, health = watch_resumed(
            self.stream.status,
            self.stream.metrics(),
            paused_at=r.paused.paused_at,
            resumed_at=r.resumed.resumed_at,
            normal=r.prepared.history.normal_backlog_events,
            timeout_s=self.observe_timeout_s,
        )
        result = {**observation.as_dict(), "health": health.as_dict(), "restarted": started}
        if health.verdict == "failed":
            log = self.stream.paths.driver_log
            trace = log if log.is_file() else f"{self.stream.paths.metrics} (its query_terminated record)"
            where = f"; the whole trace: {trace}" if health.error else ""
            result["rolled_back"] = self._rollback(
                r, f"failed after resume: {health.problem}{where}", after_resume=True
            )
        return result

    def _record(self, r: Reconfiguration) -> dict[str, Any]:
        self.stream.restart_lost_driver()
        status = self.stream.status()
        if status.get("state") == "failed":  # passed the gate, failed since: never recorded as a success
            first = summary_line(str(status.get("failure") or "no message"))
            reason = f"failed after resume: the query failed after the gate: {first}"
            return self._rollback(r, reason, after_resume=True)
        self.stream.ensure_running()  # a query stopped (not failed) since the gate, by hand: started again
        details = {
            "batches": {
                "paused_at": r.paused.batch_id,
                "migration": r.migrated.batch_id,
                "generation": self.stream.paths.generation,
            },
            "verification": r.results["verify"],
            "observation": r.results["observe"],
            "removed_checkpoints": self._remove_older_generations(),
        }
        self._finish(r, "succeeded", details)
        return {"outcome": "succeeded", "ledger_head": self.ledger.head()}
