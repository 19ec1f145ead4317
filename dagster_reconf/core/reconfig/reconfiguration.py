"""One reconfiguration as its journal in the audit ledger tells it: the plan, its actions, each step's result.

The reconfigurer writes the journal step by step; :meth:`Reconfiguration.from_ledger` reads it back, so a re-run (in
another process, after a crash) continues after the last step that ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from dagster_reconf.core.errors import ReconfError
from dagster_reconf.core.ledger import AuditLedger
from dagster_reconf.core.ledger.ledger import AuditRecord
from dagster_reconf.core.reconfig.pause_point import batch_in_flight_may_commit
from dagster_reconf.core.reconfig.plan import ExecutionPlan
from dagster_reconf.core.reconfig.step_results import (
    MigrateResult,
    ObserveResult,
    PauseResult,
    PrepareResult,
    ResumeResult,
    StepRecord,
    VerifyResult,
)

__all__ = ["Reconfiguration", "ReconfigurationRecord", "StepResult", "executors_to_add"]

R = TypeVar("R", bound=StepRecord)


class StepResult(Generic[R]):
    """A reconfiguration's attribute that reads one step's journaled result as its typed record.

    Raises:
        ReconfError: the step has not ended (check ``step in reconfiguration.results`` first).
    """

    def __init__(self, step: str, record_class: type[R]) -> None:
        self.step, self.record_class = step, record_class

    def __get__(self, reconfiguration: Reconfiguration | None, owner: type | None = None) -> R:
        if reconfiguration is None:
            return self  # type: ignore[return-value]  # the class attribute itself
        if self.step not in reconfiguration.results:
            raise ReconfError(f"reconfiguration {reconfiguration.id}: its {self.step} step has not ended")
        return self.record_class.from_record(reconfiguration.results[self.step])


@dataclass
class Reconfiguration:
    """One reconfiguration, as its journal in the ledger tells it."""

    id: str
    stream: str
    strategy: str
    current: ExecutionPlan
    target: ExecutionPlan
    actions: list[dict[str, Any]]
    trigger: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    outcome: str | None = None  # succeeded, rolled_back, failed_before/after_..., refused, noop; None: in progress
    reason: str | None = None  # why it ended as it did, where not plain success (a rollback's cause)
    rolling_back: bool = False

    @property
    def plan_hash(self) -> str:
        return self.target.plan_hash

    @property
    def needs_migration(self) -> bool:
        return any(a["effect"] == "state_migration" for a in self.actions)

    @property
    def settings_changes(self) -> dict[str, Any]:
        return {a["knob"]: a["after"] for a in self.actions}

    @property
    def needs_new_context(self) -> bool:
        return any(a["effect"] == "session_restart" for a in self.actions)

    @property
    def standby_changes(self) -> dict[str, Any]:
        """What a standby driver starts with: every change but the state partitions (the checkpoint keeps the old ones
        until the migration) and the code version (batches run the old code until the resume). So a batch the pause
        interrupted is finished there with the new cores and source partitions."""
        return {a["knob"]: a["after"] for a in self.actions if a["knob"] not in ("state_partitions", "code_version")}

    @property
    def keeps_interrupted_batch(self) -> bool:
        """Whether a batch the pause interrupts can stay planned for the resumed query: no state migration (which
        needs a committed boundary) and the same code (the batch was planned by the old one)."""
        return not self.needs_migration and "code_version" not in self.settings_changes

    @property
    def pause_lets_batch_commit(self) -> bool:
        """Whether the pause lets the live stream's batch in flight commit before it stops the query
        (:func:`~dagster_reconf.core.reconfig.pause_point.batch_in_flight_may_commit`); not with a standby, which
        finishes an interrupted batch with the new settings."""
        prepared = self.prepared
        return prepared.standby_pid is None and batch_in_flight_may_commit(
            self.strategy, self.needs_migration, prepared.precopy
        )

    prepared = StepResult("prepare", PrepareResult)
    paused = StepResult("pause", PauseResult)
    migrated = StepResult("migrate", MigrateResult)
    verification = StepResult("verify", VerifyResult)
    resumed = StepResult("resume", ResumeResult)
    observation = StepResult("observe", ObserveResult)

    @property
    def handed_over(self) -> bool:
        return "pause" in self.results and self.paused.handed_over

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def explanation(self) -> list[str]:
        """What a reader must know besides the outcome, a line each: why it rolled back, whether a precopy ran or fell
        back (and why), and preflight's warnings (a connector pairing Spark does not promise, what an at-least-once
        sink may repeat)."""
        lines = [f"{self.outcome}: {self.reason}"] if self.reason else []
        lines += [f"warning: {w}" for w in (self.results.get("preflight") or {}).get("checks", {}).get("warnings", [])]
        if "migrate" in self.results and self.migrated.fell_back:
            lines.append(f"the precopy fell back to {self.migrated.fell_back}")
        elif "migrate" in self.results and self.strategy == "precopy" and self.migrated.strategy:
            prepared = self.prepared.precopy or {}
            rounds = prepared.get("rounds") or []
            how = (
                "each round and the pause replaying their batches as one"
                if prepared.get("merge")
                else f"batch by batch ({prepared['unmergeable']})"
                if prepared.get("unmergeable")
                else "batch by batch"
            )
            lines.append(
                f"the precopy ran: its copy caught up in {len(rounds)} round(s) while the stream ran, and the pause "
                f"replayed {self.migrated.replayed_batches} batch(es), {how}"
            )
        return lines

    def started_payload(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "current": self.current.model_dump(),
            "target": self.target.model_dump(),
            "plan_hash": self.plan_hash,
            "actions": self.actions,
            "trigger": self.trigger,
            "evidence": self.evidence,
        }

    @classmethod
    def from_ledger(cls, ledger: AuditLedger, reconfiguration_id: str) -> "Reconfiguration":
        """Rebuild a reconfiguration from its journal.

        Raises:
            ReconfError: no reconfiguration with that id is in the ledger.
        """
        records = ledger.records(reconfiguration_id=reconfiguration_id)
        started = next((r for r in records if r.kind in ("reconfiguration.started", "reconfiguration.noop")), None)
        if started is None:
            raise ReconfError(f"no reconfiguration {reconfiguration_id!r} in {ledger}")
        p = started.payload
        reconfiguration = cls(
            reconfiguration_id,
            started.stream,
            p["strategy"],
            ExecutionPlan.model_validate(p["current"]),
            ExecutionPlan.model_validate(p["target"]),
            p["actions"],
            p.get("trigger", {}),
            p.get("evidence", {}),
            outcome="noop" if started.kind == "reconfiguration.noop" else None,
        )
        for record in records:
            if record.kind == "step.end":
                reconfiguration.results[record.step] = record.payload["result"]
                reconfiguration.timings[record.step] = record.payload["seconds"]
            elif record.kind == "rollback.begin":
                reconfiguration.rolling_back = True
            elif record.kind == "reconfiguration.finished":
                reconfiguration.outcome = record.payload["outcome"]
                reconfiguration.reason = record.payload.get("reason")
        return reconfiguration


def executors_to_add(r: Reconfiguration) -> int:
    """Executors a cores change within the ceiling grows to (0: none to add ahead of the pause)."""
    resources = r.target.resources
    if not any(a["effect"] == "executor_resize" for a in r.actions) or not resources.executor_cores:
        return 0
    before, after = r.current.resources.max_cores or 0, resources.max_cores or 0
    return after // resources.executor_cores if after > before else 0


@dataclass(frozen=True)
class ReconfigurationRecord:
    """A reconfiguration's final record in the ledger, read once: a finished one (its outcome, plans and figures) or
    one refused before it began (its problems). What reports and harnesses read, instead of the payload's keys."""

    id: str | None
    stream: str
    outcome: str  # succeeded, rolled_back, failed_before_pause, failed_after_resume, refused, noop
    recorded_at: float
    plan_hash: str | None = None
    current: ExecutionPlan | None = None
    target: ExecutionPlan | None = None
    actions: list[str] = field(default_factory=list)  # the knobs it changed
    problems: list[str] = field(default_factory=list)  # why it was refused
    downtime_s: float | None = None
    catch_up_s: float | None = None
    max_event_latency_s: float | None = None
    verified: bool | str | None = None  # True, False, or "no state moved"
    paused_at: float | None = None  # when its pause step ended (s since epoch)
    resumed_at: float | None = None
    run_id: str | None = None  # the Dagster run that carried it out, where one did
    step_seconds: dict[str, float] = field(default_factory=dict)
    handed_over: bool = False  # the stream moved to a warm standby driver

    KINDS: ClassVar[tuple[str, str]] = ("reconfiguration.finished", "reconfiguration.refused")

    @classmethod
    def from_record(cls, record: AuditRecord, step_ends: dict[str, float] | None = None) -> ReconfigurationRecord:
        """From a ``reconfiguration.finished`` or ``reconfiguration.refused`` ledger record (``step_ends``: when each
        of its steps ended, from its ``step.end`` records)."""
        p = record.payload
        if record.kind == "reconfiguration.refused":
            return cls(None, record.stream, "refused", record.recorded_at, problems=list(p.get("problems", [])))
        observed, verification = p.get("observation") or {}, p.get("verification") or {}
        pause = (p.get("steps") or {}).get("pause") or {}
        return cls(
            id=record.reconfiguration_id,
            stream=record.stream,
            outcome=str(p.get("outcome")),
            recorded_at=record.recorded_at,
            plan_hash=p.get("plan_hash"),
            current=ExecutionPlan.model_validate(p["current"]) if p.get("current") else None,
            target=ExecutionPlan.model_validate(p["target"]) if p.get("target") else None,
            actions=[a.get("knob", str(a)) if isinstance(a, dict) else str(a) for a in p.get("actions", [])],
            downtime_s=observed.get("downtime_s"),
            catch_up_s=observed.get("catch_up_s"),
            max_event_latency_s=observed.get("max_event_latency_s"),
            verified=verification.get("ok", "no state moved" if "skipped" in verification else None),
            paused_at=(step_ends or {}).get("pause"),
            resumed_at=(step_ends or {}).get("resume"),
            run_id=(p.get("trigger") or {}).get("run_id"),
            step_seconds=p.get("timings") or {},
            handed_over="driver_pid" in (pause.get("handover") or {}),
        )

    @classmethod
    def read(cls, ledger: AuditLedger, stream: str, since: float = 0.0) -> list[ReconfigurationRecord]:
        """The finished and refused reconfigurations of ``stream`` recorded since ``since``, oldest first."""
        found = []
        for record in ledger.records(stream=stream, kinds=list(cls.KINDS)):
            if record.recorded_at < since:
                continue
            ends = None
            if record.reconfiguration_id is not None:
                ends = {
                    r.step: r.recorded_at
                    for r in ledger.records(reconfiguration_id=record.reconfiguration_id, kinds=["step.end"])
                }
            found.append(cls.from_record(record, ends))
        return found
