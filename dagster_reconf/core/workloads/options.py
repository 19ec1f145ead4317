"""Options of the ``nexmark`` and ``words`` sources, validated (pure: no Spark needed).

Kept apart from the Spark data sources so specs, the supervisor and the CLI can build
and check options without importing pyspark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import SpecError

__all__ = ["PACING_OPTIONS", "SourceOptions"]

# Options that only shape when events are offered, never which events exist.
PACING_OPTIONS = frozenset({"rate", "max_events_per_trigger", "start_time", "start_index", "gate_file", "replay_ends"})


class SourceOptions(BaseModel):
    """Validated options of the ``nexmark`` and ``words`` sources (all units in names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(42, description="Random seed; same seed, same events.")
    rate: float = Field(1000.0, gt=0, description="Target event rate in events per wall-clock second.")
    partitions: int = Field(2, ge=1, le=10_000, description="Source partitions (Spark tasks) per micro-batch.")
    max_events: int | None = Field(None, ge=1, description="Total events; the stream ends there. None: unbounded.")
    max_events_per_trigger: int | None = Field(None, ge=1, description="Cap on events per micro-batch.")
    start_time: float | None = Field(None, ge=0, description="Epoch seconds when pacing starts; default: now.")
    start_index: int = Field(0, ge=0, description="Events already offered at start_time (for rate changes).")
    event_time_rate: int = Field(1000, ge=1, description="Events per second of event time.")
    gate_file: str | None = Field(None, description="While this file exists, no new data is offered.")
    vocabulary: int = Field(10_000, ge=1, description="words only: distinct words.")
    words_per_sentence: int = Field(8, ge=1, le=1000, description="words only: words per sentence.")
    replay_ends: str | None = Field(
        None, pattern=r"^\d+(,\d+)*$",
        description="Replay: comma-separated end offsets of the batches to re-run (ascending); the stream offers exactly "
        "those batches, ignoring pacing, then no more.",
    )

    @property
    def replay_boundaries(self) -> list[int]:
        """The replay's batch end offsets (empty when not replaying)."""
        return [int(v) for v in self.replay_ends.split(",")] if self.replay_ends else []

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
            raise SpecError(
                f"unknown option(s) {unknown} for source {source!r}; known options: {sorted(known)}"
            )
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
        """Events offered by wall-clock time ``now`` (monotone in ``now``)."""
        start = self.start_time if self.start_time is not None else pacing_start
        paced = self.start_index + max(0, math.floor((now - start) * self.rate))
        return paced if self.max_events is None else min(self.max_events, paced)
