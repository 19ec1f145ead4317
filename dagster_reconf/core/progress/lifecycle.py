"""The lifecycle records of a stream's metrics store: one typed class per event, written and read through it.

A metrics store interleaves Spark's progress records with these: what the runtime, the listener, an attached
stream's reader and a reconfiguration did to the stream. Every writer builds one of the classes below and appends
``event.to_record()``; every reader turns a record back with :func:`lifecycle_event` and matches on the class,
never on the event's name. The record's shape (``{"kind": "lifecycle", "stream", "event", ...fields}``) is what
stores written before these classes hold too, so old stores read the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "ExecutorsResized",
    "FileSinkLogAligned",
    "LifecycleEvent",
    "Paused",
    "PythonTaskCpuFailed",
    "QueryStarted",
    "QueryTerminated",
    "Restarted",
    "SettingsKnown",
    "Started",
    "Stopped",
    "lifecycle_event",
    "query_end",
]

LIFECYCLE = "lifecycle"


@dataclass(frozen=True, kw_only=True)
class LifecycleEvent:
    """One thing that happened to a stream. ``recorded_at`` (s since epoch) is set by the store when left None."""

    EVENT: ClassVar[str]

    stream: str
    recorded_at: float | None = None

    def to_record(self) -> dict[str, Any]:
        """The metrics-store record: ``kind``, ``stream``, ``event`` and this event's fields."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("stream",)}
        if fields.get("recorded_at") is None:
            fields.pop("recorded_at")
        return {"kind": LIFECYCLE, "stream": self.stream, "event": self.EVENT, **fields}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> LifecycleEvent:
        """This event from its record; fields the record lacks take their defaults, unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})


@dataclass(frozen=True, kw_only=True)
class Started(LifecycleEvent):
    """The stream's query started with ``spec`` (an attached stream's: as read from its event log)."""

    EVENT: ClassVar[str] = "started"
    spec: dict[str, Any]
    run_id: str | None = None
    query_id: str | None = None
    app: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Restarted(LifecycleEvent):
    """New settings were applied (``scope`` says how), the query runs again with ``spec`` after ``seconds``."""

    EVENT: ClassVar[str] = "restarted"
    spec: dict[str, Any]
    scope: str
    changes: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class SettingsKnown(LifecycleEvent):
    """The same configuration, better known (an attached stream's trigger, learnt from its batches)."""

    EVENT: ClassVar[str] = "settings"
    spec: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Stopped(LifecycleEvent):
    """The query stopped at a batch boundary (its fields: the batch_boundary.StopReport)."""

    EVENT: ClassVar[str] = "stopped"
    last_committed_batch: int | None = None
    seconds: float = 0.0
    attempts: int = 1
    finished_batch: int | None = None
    dropped_batch: int | None = None


@dataclass(frozen=True, kw_only=True)
class Paused(LifecycleEvent):
    """A reconfiguration paused the stream ``lead_s`` seconds after it began (its steps before the pause)."""

    EVENT: ClassVar[str] = "paused"
    reconfiguration_id: str
    lead_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class QueryStarted(LifecycleEvent):
    """Spark's listener saw the query start (a run of it: ``run_id``)."""

    EVENT: ClassVar[str] = "query_started"
    run_id: str | None = None
    query_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class QueryTerminated(LifecycleEvent):
    """The query's run ended; ``exception`` is Spark's message where it failed."""

    EVENT: ClassVar[str] = "query_terminated"
    run_id: str | None = None
    exception: str | None = None


@dataclass(frozen=True, kw_only=True)
class ExecutorsResized(LifecycleEvent):
    """Executors were added or removed in the running SparkContext."""

    EVENT: ClassVar[str] = "executors"
    wanted: int
    before: int
    after: int
    removed: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PythonTaskCpuFailed(LifecycleEvent):
    """PySpark's own CPU per Python task could not be measured; profiles go without it."""

    EVENT: ClassVar[str] = "python_task_cpu_failed"
    error: str


@dataclass(frozen=True, kw_only=True)
class FileSinkLogAligned(LifecycleEvent):
    """The file sink's log got entries for ``batches`` a migration added, and lost those of ``cleared``."""

    EVENT: ClassVar[str] = "file_sink_log_aligned"
    batches: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)


_BY_EVENT: dict[str, type[LifecycleEvent]] = {
    cls.EVENT: cls
    for cls in (
        Started,
        Restarted,
        SettingsKnown,
        Stopped,
        Paused,
        QueryStarted,
        QueryTerminated,
        ExecutorsResized,
        PythonTaskCpuFailed,
        FileSinkLogAligned,
    )
}


def lifecycle_event(record: dict[str, Any]) -> LifecycleEvent | None:
    """The typed event of a metrics-store record; None for progress records and events this version does not know
    (a newer writer's), which readers skip."""
    if record.get("kind") != LIFECYCLE:
        return None
    cls = _BY_EVENT.get(str(record.get("event")))
    if cls is None:
        return None
    try:
        return cls.from_record(record)
    except TypeError:  # a required field missing: a damaged or foreign record, skipped like an unknown one
        return None


def query_end(records: Iterable[dict[str, Any]]) -> QueryTerminated | None:
    """How the stream's query ended, where the last of ``records`` (in order) left it ended: not started since."""
    end: QueryTerminated | None = None
    running: str | None = None  # the run started last: Spark reports a start at once and an end later, so a restart's
    for record in records:  # new run can be recorded before the old run's end, which does not end the new one
        event = lifecycle_event(record)
        if isinstance(event, QueryTerminated):
            if event.run_id is None or running is None or event.run_id == running:
                end = event
        elif isinstance(event, QueryStarted):
            end, running = None, event.run_id
        elif isinstance(event, (Started, Restarted)):
            end = None
    return end
