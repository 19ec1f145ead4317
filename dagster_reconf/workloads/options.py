"""Options of the bundled workloads, validated (pure: no Spark needed).

* :class:`GeneratedOptions`: a bundled stream's own options (``StreamSpec.options``): the
  events it generates (seed, event-time rate, bound, vocabulary), how fast (``rate``) and
  what each event costs to process (``cost``).
* :class:`SourceOptions`: the options of the ``nexmark`` and ``words`` Spark sources.

Kept apart from the Spark data sources so specs and the oracle can build and check
options without importing pyspark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from dagster_reconf.core.errors import SpecError
from dagster_reconf.workloads.pacing import PacingAnchor, parse_rate_steps

__all__ = ["DATA_OPTIONS", "PACING_OPTIONS", "CostSpec", "GeneratedOptions", "SourceOptions"]

# Source options that only shape when events are offered, never which events exist.
PACING_OPTIONS = frozenset({"rate", "rate_steps", "max_events_per_trigger", "start_time", "start_index"})
# Workload options that define which events exist: never changed in place.
DATA_OPTIONS = frozenset({"seed", "event_time_rate", "max_events", "vocabulary", "words_per_sentence"})


class CostSpec(BaseModel):
    """Per-record cost knob (see :class:`~dagster_reconf.workloads.queries.RecordCost`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["none", "cpu", "sleep"] = Field("none", description="none, cpu (busy spin) or sleep (wait).")
    micros_per_record: float = Field(0.0, ge=0, le=1_000_000, description="Cost per record in microseconds.")


def _checked_steps(text: str | None) -> str | None:
    parse_rate_steps(text)
    return text


RateSteps = Annotated[str | None, AfterValidator(_checked_steps)]  # 'SECONDS:RATE,...' (see parse_rate_steps)


class GeneratedOptions(BaseModel):
    """A bundled stream's options (``StreamSpec.options``): which events, how fast, at what cost."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: float = Field(1000.0, gt=0, description="Events offered per wall-clock second.")
    rate_steps: RateSteps = Field(
        None,
        description="A load step: 'SECONDS:RATE,...', the rate from that many seconds after "
        "pacing began (e.g. '60:500,180:250' doubles 250 events/s, then halves it).",
    )
    seed: int = Field(42, description="Generator seed; same seed, same events.")
    event_time_rate: int = Field(1000, ge=1, description="Events per second of event time.")
    max_events: int | None = Field(None, ge=1, description="Total events (a bounded stream); None is unbounded.")
    vocabulary: int = Field(10_000, ge=1, description="Word count only: distinct words.")
    words_per_sentence: int = Field(8, ge=1, le=1000, description="Word count only: words per sentence.")
    cost: CostSpec = Field(default_factory=CostSpec, description="Extra work per event (real CPU or simulated I/O).")


class SourceOptions(BaseModel):
    """Validated options of the ``nexmark`` and ``words`` sources (all units in names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(42, description="Random seed; same seed, same events.")
    rate: float = Field(1000.0, gt=0, description="Target event rate in events per wall-clock second.")
    rate_steps: RateSteps = Field(
        None, description="'SECONDS:RATE,...': the rate from that many seconds after start_time."
    )
    partitions: int = Field(2, ge=1, le=10_000, description="Source partitions (Spark tasks) per micro-batch.")
    max_events: int | None = Field(None, ge=1, description="Total events; the stream ends there. None: unbounded.")
    max_events_per_trigger: int | None = Field(None, ge=1, description="Cap on events per micro-batch.")
    start_time: float | None = Field(None, ge=0, description="Epoch seconds when pacing starts; default: now.")
    start_index: int = Field(0, ge=0, description="Events already offered at start_time (for rate changes).")
    event_time_rate: int = Field(1000, ge=1, description="Events per second of event time.")
    vocabulary: int = Field(10_000, ge=1, description="words only: distinct words.")
    words_per_sentence: int = Field(8, ge=1, le=1000, description="words only: words per sentence.")

    @model_validator(mode="after")
    def _start_fits_bound(self) -> "SourceOptions":
        if self.max_events is not None and self.start_index > self.max_events:
            raise ValueError(f"start_index ({self.start_index}) must be <= max_events ({self.max_events})")
        return self

    @classmethod
    def parse(cls, options: Mapping[str, Any], source: str = "nexmark") -> "SourceOptions":
        """Parse Spark's string options; raise :class:`SpecError` naming each bad option."""
        known = set(cls.model_fields)
        given = {str(k).lower(): v for k, v in options.items() if str(k).lower() != "path"}
        unknown = sorted(set(given) - known)
        if unknown:
            raise SpecError(f"unknown option(s) {unknown} for source {source!r}; known options: {sorted(known)}")
        try:
            return cls.model_validate({k: (None if v in ("", "None") else v) for k, v in given.items()})
        except ValidationError as exc:
            problems = "; ".join(
                f"option {'.'.join(map(str, e['loc']))!s}={given.get(str(e['loc'][0]) if e['loc'] else '', '')!r}: "
                f"{e['msg']}"
                for e in exc.errors()
            )
            raise SpecError(f"invalid options for source {source!r}: {problems}") from None

    def to_spark(self, exclude: frozenset[str] = frozenset()) -> dict[str, str]:
        """The options as ``DataStreamReader.options(**...)`` takes them (unset ones left out)."""
        return {k: str(v) for k, v in self.model_dump(exclude_none=True, exclude=set(exclude)).items()}

    def offered(self, now: float, pacing_start: float) -> int:
        """Events offered by wall-clock time ``now`` (monotone in ``now``); pacing began at ``start_time``, or else
        at ``pacing_start``."""
        start = self.start_time if self.start_time is not None else pacing_start
        return PacingAnchor(start, self.start_index, self.rate, self.rate_steps).offered(now, self.max_events)
