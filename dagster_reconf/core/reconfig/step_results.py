"""The results of the steps that later steps read, typed: the prepare step's and the pause's.

Each step's result is journaled in the ledger as JSON (its ``step.end`` record), so a re-run in another process
continues from it; a later step reads it back through these classes, never by key path. ``to_record`` is what is
journaled; ``from_record`` reads a journaled one (fields a record lacks take their defaults).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PauseResult", "PrepareResult", "RecentPace"]


def _known(cls: type, record: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in record.items() if k in names}


@dataclass(frozen=True)
class RecentPace:
    """The batches before a pause: their backlog (what "caught up" means afterwards) and their pace."""

    normal_backlog_events: float
    batches: int = 0
    offered_events_per_s: float | None = None
    batch_s: float | None = None  # median batch duration
    seconds_per_batch: float | None = None  # median time between commits

    def to_record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RecentPace:
        return cls(**_known(cls, record))


@dataclass(frozen=True)
class PrepareResult:
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
class PauseResult:
    """Where the pause left the stream: the batch its checkpoint ends at, the generation in force, a handover."""

    paused_at: float  # s since epoch, when the pause began
    generation: int
    batch_id: int | None  # the last committed batch
    handover: dict[str, Any] | None = None  # the standby that took over (its driver_pid), or why it did not

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PauseResult:
        return cls(**_known(cls, record))

    @property
    def handed_over(self) -> bool:
        return "driver_pid" in (self.handover or {})
