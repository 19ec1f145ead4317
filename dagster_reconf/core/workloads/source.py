"""PySpark Python data sources ``nexmark`` and ``words`` over the event generators.

Offsets are event indexes (``{"index": n}``), so any range can be replayed exactly
after a restart. Streaming reads are paced by the wall clock: at time ``t`` the
source offers ``start_index + (t - start_time) * rate`` events (capped by
``max_events``), so a job that falls behind builds a real backlog, and the backlog
keeps growing while the job is down, as it would with Kafka.

The *gate* is how the runtime stops a query at a micro-batch boundary: while the
file named by ``gate_file`` exists, ``latestOffset`` returns ``start`` (no new data),
so the running batch commits and no new data batch starts.

Batch reads (``spark.read.format("nexmark").option("max_events", n)``) return events
``[0, n)``: that is how the correctness oracle replays a stream as a batch job.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from ..errors import SpecError
from .generator import EventGenerator, NexmarkGenerator, WordsGenerator

__all__ = ["NexmarkDataSource", "SourceOptions", "WordsDataSource", "register_sources", "spark_schema_ddl"]

_ARROW_CHUNK_ROWS = 32_768


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

    def offered(self, now: float, pacing_start: float) -> int:
        """Events offered by wall-clock time ``now`` (monotone in ``now``)."""
        start = self.start_time if self.start_time is not None else pacing_start
        paced = self.start_index + max(0, math.floor((now - start) * self.rate))
        return paced if self.max_events is None else min(self.max_events, paced)


def spark_schema_ddl(schema: pa.Schema) -> str:
    """Spark DDL for an Arrow schema of the generators (structs, strings, longs, timestamps)."""

    def ddl(t: pa.DataType) -> str:
        if pa.types.is_struct(t):
            return "struct<" + ", ".join(f"{f.name}: {ddl(f.type)}" for f in t) + ">"
        if pa.types.is_int64(t):
            return "bigint"
        if pa.types.is_int32(t):
            return "int"
        if pa.types.is_string(t):
            return "string"
        if pa.types.is_timestamp(t):
            return "timestamp"
        raise TypeError(f"no Spark DDL mapping for Arrow type {t}")

    return ", ".join(f"{f.name} {ddl(f.type)}" for f in schema)


def _index_ranges(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` into at most ``parts`` contiguous, non-empty ranges."""
    total = end - start
    if total <= 0:
        return []
    parts = min(parts, total)
    bounds = [start + (total * k) // parts for k in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


class IndexRange(InputPartition):
    """Events ``[lo, hi)`` read by one Spark task."""

    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo, self.hi = lo, hi


def _partitions(start: int, end: int, parts: int) -> list[IndexRange]:
    return [IndexRange(lo, hi) for lo, hi in _index_ranges(start, end, parts)]


class GeneratedStreamReader(DataSourceStreamReader):
    """Paced, gated, replayable stream reader over an :class:`EventGenerator`."""

    def __init__(self, options: SourceOptions, generator: EventGenerator) -> None:
        self.options = options
        self.generator = generator
        self.pacing_start = time.time()

    def initialOffset(self) -> dict:
        return {"index": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_events_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["index"])
        gate = self.options.gate_file
        if gate and os.path.exists(gate):
            return {"index": begin}
        end = max(begin, self.options.offered(time.time(), self.pacing_start))
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + int(limit.max_rows))
        return {"index": end}

    def reportLatestOffset(self) -> dict:
        return {"index": self.options.offered(time.time(), self.pacing_start)}

    def partitions(self, start: dict, end: dict) -> list[IndexRange]:
        return _partitions(int(start["index"]), int(end["index"]), self.options.partitions)

    def read(self, partition: IndexRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from self.generator.batches(partition.lo, partition.hi, _ARROW_CHUNK_ROWS)

    def commit(self, end: dict) -> None:
        """Nothing to release: events are regenerated from their index on demand."""


class GeneratedBatchReader(DataSourceReader):
    """Events ``[0, max_events)`` as a batch: the oracle's input."""

    def __init__(self, options: SourceOptions, generator: EventGenerator) -> None:
        if options.max_events is None:
            raise SpecError("a batch read of a generated source needs option max_events (events [0, n))")
        self.options = options
        self.generator = generator

    def partitions(self) -> list[IndexRange]:
        return _partitions(0, int(self.options.max_events or 0), self.options.partitions)

    def read(self, partition: IndexRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from self.generator.batches(partition.lo, partition.hi, _ARROW_CHUNK_ROWS)


class _GeneratedSource(DataSource):
    source_name: ClassVar[str]

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(dict(options), self.source_name)

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    def generator(self) -> EventGenerator:
        return NexmarkGenerator(seed=self.parsed.seed, event_time_rate=self.parsed.event_time_rate)

    def schema(self) -> str:
        return spark_schema_ddl(self.generator().schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratedStreamReader(self.parsed, self.generator())

    def reader(self, schema: Any) -> DataSourceReader:
        return GeneratedBatchReader(self.parsed, self.generator())


class NexmarkDataSource(_GeneratedSource):
    """``spark.readStream.format("nexmark")``: persons, auctions and bids (1:3:46)."""

    source_name = "nexmark"


class WordsDataSource(_GeneratedSource):
    """``spark.readStream.format("words")``: sentences of words from a fixed vocabulary."""

    source_name = "words"

    def generator(self) -> EventGenerator:
        return WordsGenerator(
            seed=self.parsed.seed,
            event_time_rate=self.parsed.event_time_rate,
            vocabulary=self.parsed.vocabulary,
            words_per_sentence=self.parsed.words_per_sentence,
        )


def register_sources(spark: SparkSession) -> None:
    """Register ``nexmark`` and ``words`` with a SparkSession (idempotent)."""
    spark.dataSource.register(NexmarkDataSource)
    spark.dataSource.register(WordsDataSource)
