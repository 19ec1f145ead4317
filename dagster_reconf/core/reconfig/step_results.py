"""Each step's result, typed: what later steps, the Dagster metadata, the CLI and the benchmarks read.

Each step's result is journaled in the ledger as JSON (its ``step.end`` record), so a re-run in another process
continues from it; a later step reads it back through these classes, never by key path. ``to_record`` is what is
journaled; ``from_record`` reads a journaled one (fields a record lacks take their defaults).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = [
    "StepRecord",
    "MigrateResult",
    "ObserveResult",
    "PauseResult",
    "PrepareResult",
    "RecentPace",
    "ResumeResult",
    "VerifyResult",
]


def _known(cls: type, record: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in record.items() if k in names}


class StepRecord:
    """A step's journaled result read back: the fields the class declares (others, from older or newer writers, are
    dropped; missing ones take their defaults)."""

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Self:
        return cls(**_known(cls, record))


@dataclass(frozen=True)
class RecentPace(StepRecord):
    """The batches before a pause: their backlog (what "caught up" means afterwards) and their pace."""

    normal_backlog_events: float
    batches: int = 0
    offered_events_per_s: float | None = None
    batch_s: float | None = None  # median batch duration
    seconds_per_batch: float | None = None  # median time between commits

    def to_record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PrepareResult(StepRecord):
    """What the prepare step did while the stream still ran."""

    history: RecentPace
    target_settings: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # the state's summary, read while the stream ran (a migration)
    executors: dict[str, Any] | None = None  # executors added ahead of the pause
    standby: dict[str, Any] = field(default_factory=dict)  # a warm standby driver (its pid), or why none
    precopy: dict[str, Any] | None = None  # the prepared copy of the state, or why none

    def to_record(self) -> dict[str, Any]:
        record = {**dataclasses.asdict(self), "history": self.history.to_record()}
        return {k: v for k, v in record.items() if v not in (None, {})}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PrepareResult:
        fields = _known(cls, record)
        return cls(
            **{**fields, "history": RecentPace.from_record(record.get("history") or {"normal_backlog_events": 0})}
        )

    @property
    def standby_pid(self) -> int | None:
        return int(self.standby["pid"]) if "pid" in self.standby else None


@dataclass(frozen=True)
class PauseResult(StepRecord):
    """Where the pause left the stream: the batch its checkpoint ends at, the generation in force, a handover."""

    paused_at: float  # s since epoch, when the pause began (after the batch in flight committed, where it waited)
    generation: int
    batch_id: int | None  # the last committed batch
    handover: dict[str, Any] | None = None  # the standby that took over (its driver_pid), or why it did not
    boundary_wait_s: float = 0.0  # the stream ran on this long, to commit its batch in flight, before the stop

    @property
    def handed_over(self) -> bool:
        return "driver_pid" in (self.handover or {})


@dataclass(frozen=True)
class MigrateResult(StepRecord):
    """What the migrate step did to the paused stream's state."""

    strategy: str | None = None  # native or replay (a precopy finishes by replay, or falls back to native)
    batch_id: int | None = None  # the last committed batch after the migration
    generation: int | None = None
    skipped: bool | str = False  # True, or why, where nothing had to move
    reason: str | None = None
    seconds: float | None = None
    replays: list[dict[str, Any]] = field(default_factory=list)  # a precopy's catch-up replays in the pause
    replayed_batches: int = 0
    fell_back: str | None = None  # a precopy that ran the native migration instead: why
    snapshot: str | None = None  # the checkpoint's snapshot a rollback restores


@dataclass(frozen=True)
class VerifyResult(StepRecord):
    """The migrated state against the paused one, store by store; ``ok`` is False where it was rolled back."""

    ok: bool = True
    skipped: str | None = None  # why nothing was checked (no state migration)
    problems: list[str] = field(default_factory=list)
    stores: list[dict[str, Any]] = field(default_factory=list)  # one row per state store: rows, checksums
    gx: dict[str, Any] | None = None  # the Great Expectations suite's outcome over the table
    before_batch: int | None = None
    after_batch: int | None = None
    rolled_back: dict[str, Any] | None = None
    delta_batches: int | None = None  # a precopy verified before the pause: the batches checked in it
    copy_verified_at: int | None = None  # ... and the live batch its copy was verified at

    @property
    def state_rows(self) -> int:
        return sum(int(store.get("rows_after") or 0) for store in self.stores)


@dataclass(frozen=True)
class ResumeResult(StepRecord):
    """How the stream was resumed: what was restarted (``scope``: query, executors, session) and when."""

    resumed_at: float
    scope: str | None = None


@dataclass(frozen=True)
class ObserveResult(StepRecord):
    """How the stream went through the change: its downtime, catch-up and worst event latency."""

    pause_s: float | None = None
    downtime_s: float | None = None
    catch_up_s: float | None = None
    max_event_latency_s: float | None = None
    batches_observed: int = 0
    caught_up: bool = False
    normal_backlog_events: float = 0.0
    restarted: dict[str, Any] | bool = False  # a driver that died after the resume, started again: what was done
    health: dict[str, Any] | None = None  # the health gate's verdict (see reconfig/health.py)
    rolled_back: dict[str, Any] | None = None  # what a failed gate undid
