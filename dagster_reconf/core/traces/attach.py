"""Attached streams: Spark streaming queries the control plane observes from their event logs alone.

Many streams run where dagster-reconf does not start them (Databricks, EMR, a team's own
``spark-submit``); their event logs land in a directory or object storage. An attached
stream is that location, an optional filter (application name or id, query name or id) and
optionally the checkpoint. Spark writes a query's ``QueryStartedEvent``,
``QueryProgressEvent`` and ``QueryTerminatedEvent`` into the event log, and the settings in
force into ``SparkListenerEnvironmentUpdate``; :class:`AttachedReader` reads them
incrementally into the stream's metrics store, as the same progress and lifecycle records a
managed stream's driver writes. So the trace snapshots, CP summaries, scaling sensor and DS2
plans work unchanged, recommend-only: there is no driver to apply a plan to.

Streams are kept apart: each query is its own stream (a filter picks it; without one the
log must hold a single query name), applications in the directory are told apart (a driver
restart starts a new one: the same query continues), and a log that still grows is read
from where the last read stopped. The trigger interval is not in the log: give it, or it is
inferred from the batches' start times (a processing-time trigger starts batches on multiples
of its interval).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dagster_reconf.core.errors import SpecError, validated
from dagster_reconf.core.progress.lifecycle import QueryTerminated, SettingsKnown, Started
from dagster_reconf.core.spec import StreamSpec, validate_master
from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import Location, location_of, validate_storage_url
from dagster_reconf.core.traces.eventlog import EventLogError, LogCursor, read_events
from dagster_reconf.core.traces.store import application_logs

__all__ = ["AttachSpec", "AttachedReader", "attach", "infer_trigger_interval_s"]

_LISTENER = "org.apache.spark.sql.streaming.StreamingQueryListener$"
STARTED, PROGRESS, TERMINATED = (
    _LISTENER + e for e in ("QueryStartedEvent", "QueryProgressEvent", "QueryTerminatedEvent")
)
APP_START, ENVIRONMENT = "SparkListenerApplicationStart", "SparkListenerEnvironmentUpdate"
READ_EVENTS = frozenset({STARTED, PROGRESS, TERMINATED, APP_START, ENVIRONMENT})
_LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\s*\d+)?\])?$")


class AttachSpec(BaseModel):
    """Where an attached stream's event logs are, and which query in them is the stream."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        ..., pattern=r"^[a-z][a-z0-9_\-]{0,62}$", description="Stream name: lowercase letters, digits, - and _."
    )
    event_logs: str = Field(
        ...,
        description="The event log directory: an absolute local path or any fsspec URL "
        "(s3://, gs://, abfs://, hdfs://, file://).",
    )
    application: str | None = Field(None, description="Only applications with this name (spark.app.name) or id.")
    query: str | None = Field(None, description="The query's name or id (needed where the applications run several).")
    checkpoint: str | None = Field(None, description="The query's checkpoint location, for its state metadata.")
    trigger_interval_s: float | None = Field(
        None, ge=0, le=3600, description="The query's trigger interval; None: inferred from its batches' start times."
    )

    @field_validator("event_logs", "checkpoint")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        if value is None or value.startswith("/"):
            return value.rstrip("/") if value else value
        return validate_storage_url(value)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> "AttachSpec":
        """Validate ``data``; raise :class:`SpecError` naming each bad field and its value."""
        return validated(cls, data, "attach spec")


def attach(home: Any, spec: AttachSpec) -> dict[str, Any]:
    """Register an attached stream under ``home`` and read what its event logs hold so far.

    Raises:
        SpecError: the event log location does not exist, or a managed stream already has the name.
    """
    paths = StreamPaths(home, spec.name)
    if paths.spec.is_file() and not paths.attached.is_file():
        raise SpecError(f"stream {spec.name!r} is a managed stream under {home}; attach under another name")
    directory = location_of(spec.event_logs)
    if not directory.is_dir():
        raise SpecError(
            f"event log directory {spec.event_logs} does not exist or is not a directory; point --event-logs "
            "at the spark.eventLog.dir of the application"
        )
    paths.create()
    if paths.attached.is_file():
        before = AttachSpec.model_validate_json(paths.attached.read_text())
        if (before.event_logs, before.application, before.query) != (spec.event_logs, spec.application, spec.query):
            for stale in (paths.cursors, paths.query_ids_file, paths.spec):  # another stream: from the start
                stale.unlink(missing_ok=True)
            MetricsStore(paths.metrics).remove()
    replace_text(paths.attached, spec.model_dump_json(indent=2))
    reader = AttachedReader(paths)
    return reader.refresh()


class AttachedReader:
    """Reads an attached stream's event logs into its metrics store, from where the last read stopped."""

    def __init__(self, paths: StreamPaths) -> None:
        self.paths = paths
        self.spec = AttachSpec.model_validate_json(paths.attached.read_text())
        self.store = MetricsStore(paths.metrics)

    def _state(self) -> dict[str, Any]:
        try:
            return json.loads(self.paths.cursors.read_text())
        except FileNotFoundError:
            return {"logs": {}, "query_name": None, "starts": [], "recent": [], "spec": None}

    def _save(self, state: dict[str, Any]) -> None:
        replace_text(self.paths.cursors, json.dumps(state))

    def refresh(self, max_events: int | None = None) -> dict[str, Any]:
        """Append what is new in the event logs to the metrics store; what was read, and what was left aside."""
        state = self._state()
        found: dict[str, Any] = {"applications": [], "progress": 0, "ignored_queries": set(), "skipped": {}}
        latest = None
        for log in application_logs(location_of(self.spec.event_logs)):
            key = log.name.removesuffix(".inprogress")
            entry = state["logs"].setdefault(key, {"cursor": None, "app": None, "environment": {}})
            try:
                result = read_events(log, LogCursor.from_json(entry["cursor"]), max_events=max_events, only=READ_EVENTS)
            except (EventLogError, FileNotFoundError) as exc:  # a file that is no log, or renamed while read
                found["skipped"][f"{log.name}: {exc}"] = 1
                continue
            for event in result.events:
                self._take(event, entry, state, found)
            entry["cursor"] = result.cursor.to_json()
            for reason, count in result.skipped.items():
                if not reason.startswith("event not used"):
                    found["skipped"][reason] = found["skipped"].get(reason, 0) + count
            if entry["app"] and self._app_matches(entry["app"]):
                found["applications"].append(entry["app"])
                latest = entry
        if state.get("spec") is not None and latest is not None:  # settings given since (a trigger interval, say)
            before = state["spec"]
            if self._publish(latest, state).model_dump() != before:
                self.store.append(SettingsKnown(stream=self.spec.name, spec=state["spec"]).to_record())
        self._save(state)
        found["ignored_queries"] = sorted(found["ignored_queries"])
        found["query_name"] = state["query_name"]
        return found

    def _app_matches(self, app: dict[str, Any]) -> bool:
        wanted = self.spec.application
        return wanted is None or wanted in (app.get("name"), app.get("id"))

    def _query_matches(
        self, name: str | None, query_id: str | None, state: dict[str, Any], found: dict[str, Any]
    ) -> bool:
        wanted = self.spec.query
        if wanted is not None:
            matches = wanted in (name, query_id)
            if matches:
                state["query_name"] = name or state["query_name"]
        else:  # no filter: the stream is the first query seen; others are said, never mixed in
            state["query_name"] = state["query_name"] or name
            matches = name == state["query_name"]
        if not matches:
            found["ignored_queries"].add(name or query_id or "?")
        return matches

    def _take(self, event: dict[str, Any], entry: dict[str, Any], state: dict[str, Any], found: dict[str, Any]) -> None:
        kind = event.get("Event")
        if kind == APP_START:
            entry["app"] = {"name": event.get("App Name"), "id": event.get("App ID")}
            return
        if kind == ENVIRONMENT:
            properties = event.get("Spark Properties") or {}
            entry["environment"] = dict(properties if isinstance(properties, dict) else properties)
            return
        if entry["app"] is not None and not self._app_matches(entry["app"]):
            return
        if kind == STARTED:
            if self._query_matches(event.get("name"), event.get("id"), state, found):
                self.paths.add_query_id(str(event.get("id")))
                state["starts"].append({"run_id": event.get("runId"), "timestamp": event.get("timestamp")})
                state["recent"] = []  # a new run (a driver restart, say): its own batches tell its trigger
                spec = self._publish(entry, state)
                started = Started(
                    stream=self.spec.name,
                    spec=spec.model_dump(),
                    run_id=event.get("runId"),
                    query_id=event.get("id"),
                    app=entry["app"],
                    recorded_at=_event_time(event.get("timestamp")),
                )
                self.store.append(started.to_record())
        elif kind == PROGRESS:
            progress = event.get("progress") or {}
            if self._query_matches(progress.get("name"), progress.get("id"), state, found):
                self.paths.add_query_id(str(progress.get("id")))
                self.store.append({"kind": "progress", "stream": self.spec.name, "progress": progress})
                found["progress"] += 1
                self._remember(progress, state)
                before = state.get("spec")
                spec = self._publish(entry, state)
                if before is not None and spec.model_dump() != before:  # the trigger became known: same configuration
                    self.store.append(SettingsKnown(stream=self.spec.name, spec=spec.model_dump()).to_record())
        elif kind == TERMINATED:
            if str(event.get("id")) in self.paths.query_ids:
                self.store.append(
                    QueryTerminated(
                        stream=self.spec.name,
                        run_id=event.get("runId"),
                        exception=event.get("exception"),
                        recorded_at=_last_batch_end(state),
                    ).to_record()
                )

    def _remember(self, progress: dict[str, Any], state: dict[str, Any]) -> None:
        """The last batches' start times (for the trigger interval) and the state partitions they report."""
        recent = state.setdefault("recent", [])
        recent.append(
            {
                "timestamp": progress.get("timestamp"),
                "ms": (progress.get("durationMs") or {}).get("triggerExecution", 0),
                "partitions": max(
                    [int(op.get("numShufflePartitions") or 0) for op in progress.get("stateOperators") or []], default=0
                ),
            }
        )
        del recent[:-60]

    def _publish(self, entry: dict[str, Any], state: dict[str, Any]) -> StreamSpec:
        """The knobs in force as the stream's spec, written where every reader of a stream's spec looks."""
        spec = self._spec(entry, state)
        if state.get("spec") != spec.model_dump():
            state["spec"] = spec.model_dump()
            self.paths.write_spec(spec.model_dump_json(indent=2))
        return spec

    def _spec(self, entry: dict[str, Any], state: dict[str, Any]) -> StreamSpec:
        """The knobs in force as a (definition-less) spec: master and cores from the environment, state partitions
        from the checkpoint or the environment, the trigger given or inferred."""
        env = entry.get("environment") or {}
        master = env.get("spark.master", "local[*]")
        try:
            validate_master(master)
        except SpecError:
            master = "yarn" if "yarn" in master else "local[*]"  # a master we cannot plan cores for by name
        partitions = None
        if self.spec.checkpoint is not None:
            partitions = checkpoint_facts(location_of(self.spec.checkpoint)).state_partitions
        partitions = partitions or int(env.get("spark.sql.shuffle.partitions", 200))
        max_cores = env.get("spark.cores.max")
        if max_cores is None and not _LOCAL_MASTER.match(master) and env.get("spark.executor.instances"):
            max_cores = int(env["spark.executor.instances"]) * int(env.get("spark.executor.cores", 1))
        return StreamSpec(
            name=self.spec.name,
            entrypoint=None,
            master=master,
            state_partitions=partitions,
            max_cores=int(max_cores) if max_cores else None,
            trigger_interval_s=self.trigger_interval_s(state),
        )

    def trigger_interval_s(self, state: dict[str, Any] | None = None) -> float:
        """The given trigger interval, else one inferred from the batches' start times (1 s until it can be)."""
        if self.spec.trigger_interval_s is not None:
            return self.spec.trigger_interval_s
        recent = (state or self._state()).get("recent") or []
        if len(recent) < 3:
            return 1.0
        frame = pd.DataFrame(recent)
        starts_ms = (
            pd.to_datetime(frame["timestamp"], utc=True, format="ISO8601").astype("int64").to_numpy() // 1_000_000
        )
        inferred = infer_trigger_interval_s(starts_ms, frame["ms"].to_numpy(dtype=np.int64))
        return 1.0 if inferred is None else inferred


def infer_trigger_interval_s(starts_ms: np.ndarray, durations_ms: np.ndarray, tolerance_ms: int = 30) -> float | None:
    """A processing-time trigger's interval from its batches: a batch that did not follow its predecessor at once
    started on a multiple of the interval since the epoch (Spark aligns triggers so). The largest interval that
    most such starts sit on, no longer than the longest gap between two starts; None where too few batches waited."""
    ends = starts_ms[:-1] + durations_ms[:-1]
    waited = np.flatnonzero(starts_ms[1:] - ends > tolerance_ms) + 1
    if len(waited) < 2:
        return None
    longest = int(np.max(np.diff(starts_ms)))
    candidates = np.arange(100, longest + tolerance_ms + 1, 50)
    if not len(candidates):
        return None
    offsets = starts_ms[waited][None, :] % candidates[:, None]
    aligned = (np.minimum(offsets, candidates[:, None] - offsets) <= tolerance_ms).mean(axis=1)
    good = candidates[aligned >= 0.6]
    return round(float(good.max()) / 1000.0, 2) if len(good) else None


def attached_location(paths: StreamPaths) -> Location | None:
    """An attached stream's event log directory (None for a managed stream)."""
    if not paths.attached.is_file():
        return None
    return location_of(AttachSpec.model_validate_json(paths.attached.read_text()).event_logs)


def _last_batch_end(state: dict[str, Any]) -> float | None:
    """When the query's last batch seen ended (Spark's termination event carries no time): its start plus its
    duration. None before any batch, or where the log has no readable time."""
    recent = state.get("recent") or []
    started = _event_time(recent[-1].get("timestamp")) if recent else None
    return None if started is None else started + float(recent[-1].get("ms") or 0) / 1000.0


def _event_time(timestamp: Any) -> float | None:
    """``recorded_at`` = when Spark says the query started (not when the log was read): a configuration's age and
    which batches came after its warm-up are measured from it. None where the log has no readable time."""
    try:
        return pd.Timestamp(timestamp).timestamp() if timestamp else None
    except (ValueError, TypeError):
        return None
