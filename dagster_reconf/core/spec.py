"""What a managed stream is: :class:`StreamSpec`, validated at the boundary.

A spec names the bundled query, where it runs (Spark master) and every knob the
control plane may turn later. Settings differ in what changing them costs, and
:func:`restart_scope` says which: some only restart the query, some need a fresh
SparkContext (same driver process, same JVM), the state partitions need a state
migration, and some would change the data itself and are never changed in place.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import SpecError
from .storage import validate_storage_url
from .workloads.options import SourceOptions
from .workloads.queries import QUERIES

__all__ = ["RestartScope", "StreamSpec", "format_validation_error", "restart_scope", "validate_master"]

_MASTER_PATTERNS = [
    re.compile(r"^local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?$"),
    re.compile(r"^spark://[A-Za-z0-9.\-]+:\d{1,5}(,[A-Za-z0-9.\-]+:\d{1,5})*$"),
    re.compile(r"^k8s://https?://\S+$"),
    re.compile(r"^yarn$"),
]
_NAME_PATTERN = r"^[a-z][a-z0-9_\-]{0,62}$"


def validate_master(master: str) -> str:
    """Return ``master`` if it is a Spark master URL Spark understands, else raise SpecError."""
    if any(p.match(master) for p in _MASTER_PATTERNS):
        return master
    raise SpecError(
        f"master {master!r} is not a Spark master URL; use local[N] (e.g. local[2]), "
        "spark://HOST:PORT (a standalone cluster, see `reconf cluster start`), k8s://https://HOST:PORT or yarn"
    )


class CostSpec(BaseModel):
    """Per-record cost knob (see :class:`~dagster_reconf.core.workloads.queries.RecordCost`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["none", "cpu", "sleep"] = Field("none", description="none, cpu (busy spin) or sleep (wait).")
    micros_per_record: float = Field(0.0, ge=0, le=1_000_000, description="Cost per record in microseconds.")


class StreamSpec(BaseModel):
    """A managed stream: bundled query, placement and parallelism knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=_NAME_PATTERN, description="Stream name: lowercase letters, digits, - and _.")
    query: str = Field(..., description="Bundled query: q1, q2, q3, q5, q8, q11 or wordcount.")
    code_version: str = Field("1", description="Version of the query's logic (see QueryDefinition.code_versions).")
    master: str = Field("local[2]", description="Spark master URL.")
    rate: float = Field(1000.0, gt=0, description="Source rate in events per wall-clock second.")
    source_partitions: int = Field(2, ge=1, le=10_000, description="Source partitions per micro-batch.")
    state_partitions: int = Field(4, ge=1, le=10_000, description="spark.sql.shuffle.partitions (fixed by the checkpoint for stateful queries).")
    trigger_interval_s: float = Field(1.0, ge=0, le=3600, description="Processing-time trigger interval in seconds.")
    max_events_per_trigger: int | None = Field(None, ge=1, description="Cap on events per micro-batch.")
    max_events: int | None = Field(None, ge=1, description="Total events (bounded stream); None is unbounded.")
    seed: int = Field(42, description="Generator seed.")
    event_time_rate: int = Field(1000, ge=1, description="Events per second of event time.")
    vocabulary: int = Field(10_000, ge=1, description="wordcount only: distinct words.")
    words_per_sentence: int = Field(8, ge=1, le=1000, description="wordcount only: words per sentence.")
    cost: CostSpec = Field(default_factory=CostSpec, description="Per-record cost knob.")
    executor_cores: int | None = Field(None, ge=1, description="Cores per executor (cluster masters).")
    max_cores: int | None = Field(None, ge=1, description="spark.cores.max: total cores of the application (cluster masters).")
    executor_memory: str | None = Field(None, pattern=r"^\d+[kmgt]?$", description="Executor memory, e.g. 1g.")
    instrumentation: bool = Field(True, description="Event log and progress listener on (off only for overhead benchmarks).")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    storage: str | None = Field(None, description="URL where checkpoints and event logs live (any Hadoop-compatible "
                                "filesystem: file:///, hdfs://, s3a://, ...); None keeps them under the runtime home.")

    @field_validator("query")
    @classmethod
    def _known_query(cls, value: str) -> str:
        if value not in QUERIES:
            raise ValueError(f"unknown query {value!r}; bundled queries: {', '.join(QUERIES)}")
        return value

    @field_validator("storage")
    @classmethod
    def _valid_storage(cls, value: str | None) -> str | None:
        return None if value is None else validate_storage_url(value)

    @field_validator("master")
    @classmethod
    def _valid_master(cls, value: str) -> str:
        try:
            return validate_master(value)
        except SpecError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _known_code_version(self) -> "StreamSpec":
        query = QUERIES.get(self.query)
        if query is not None and self.code_version not in query.versions:
            raise ValueError(f"query {self.query!r} has no code version {self.code_version!r}; versions: {', '.join(query.versions)}")
        return self

    @model_validator(mode="after")
    def _conf_not_shadowing(self) -> "StreamSpec":
        owned = {"spark.master", "spark.sql.shuffle.partitions", "spark.eventLog.enabled", "spark.eventLog.dir"}
        clash = sorted(owned & set(self.spark_conf))
        if clash:
            raise ValueError(f"spark_conf must not set {clash}: use the spec fields master/state_partitions instead")
        return self

    @classmethod
    def parse(cls, data: dict[str, Any]) -> "StreamSpec":
        """Validate ``data``; raise :class:`SpecError` naming each bad field and its value."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(format_validation_error("stream spec", exc, data)) from None

    def data_options(self, max_events: int | None = None) -> SourceOptions:
        """Source options that define which events exist (for the oracle; the runtime adds pacing).

        Args:
            max_events: bound the events to ``[0, max_events)`` (default: the spec's own bound).
        """
        return SourceOptions(
            seed=self.seed,
            partitions=self.source_partitions,
            max_events=max_events if max_events is not None else self.max_events,
            event_time_rate=self.event_time_rate,
            vocabulary=self.vocabulary,
            words_per_sentence=self.words_per_sentence,
        )

    def with_changes(self, changes: dict[str, Any]) -> "StreamSpec":
        """A copy with ``changes`` applied and validated."""
        merged = self.model_dump()
        for key, value in changes.items():
            if key == "cost" and isinstance(value, dict):
                merged["cost"] = {**merged["cost"], **value}
            else:
                merged[key] = value
        return StreamSpec.parse(merged)


def format_validation_error(what: str, exc: ValidationError, data: Any) -> str:
    """One line per problem: the field, the given value and what is allowed."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        value: Any = data
        for part in err["loc"]:
            value = value.get(part) if isinstance(value, dict) else None
        given = "missing" if err["type"] == "missing" else f"got {value!r}"
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {message} ({given})")
    return f"invalid {what}: " + "; ".join(lines)


class RestartScope(str, Enum):
    """What applying a settings change costs, cheapest first."""

    NONE = "none"  # nothing changed
    QUERY = "query"  # stop at a batch boundary, start the query again
    SESSION = "session"  # also a new SparkContext in the same driver process
    STATE = "state"  # state partitions change: needs a state migration


QUERY_FIELDS = {"rate", "source_partitions", "trigger_interval_s", "max_events_per_trigger", "cost", "code_version"}
SESSION_FIELDS = {"master", "executor_cores", "max_cores", "executor_memory", "spark_conf", "instrumentation"}
DATA_FIELDS = {"name", "query", "seed", "event_time_rate", "vocabulary", "words_per_sentence", "max_events", "storage"}


def restart_scope(old: StreamSpec, new: StreamSpec) -> RestartScope:
    """Classify the change from ``old`` to ``new``; refuse changes that alter the data."""
    changed = {k for k in StreamSpec.model_fields if getattr(old, k) != getattr(new, k)}
    frozen = sorted(changed & DATA_FIELDS)
    if frozen:
        raise SpecError(
            f"{frozen} define the stream's data and cannot change in place; start a new stream with another name"
        )
    if not changed:
        return RestartScope.NONE
    if "state_partitions" in changed and QUERIES[old.query].stateful:
        return RestartScope.STATE
    if changed & SESSION_FIELDS:
        return RestartScope.SESSION
    return RestartScope.QUERY
