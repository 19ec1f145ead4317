"""PySpark Python data sources ``nexmark`` and ``words`` over the event generators.

Offsets are event indexes (``{"index": n}``), so any range can be replayed exactly
after a restart. Streaming reads are paced by the wall clock: at time ``t`` the
source offers ``start_index + (t - start_time) * rate`` events (capped by
``max_events``), so a job that falls behind builds a real backlog, and the backlog
keeps growing while the job is down, as it would with Kafka.

A planned batch re-run from a checkpoint's offset log (a restart after a crash, a replay
migration) asks only for its logged range: events are regenerated from their indexes.

Batch reads (``spark.read.format("nexmark").option("max_events", n)``) return events
``[0, n)``: that is how the correctness oracle replays a stream as a batch job.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from dagster_reconf.core.errors import SpecError
from dagster_reconf.workloads.generator import EventGenerator, NexmarkGenerator, WordsGenerator
from dagster_reconf.workloads.pacing import PacingAnchor

if TYPE_CHECKING:
    from dagster_reconf.workloads.options import SourceOptions

__all__ = ["NexmarkDataSource", "WordsDataSource", "register_sources", "spark_schema_ddl"]

_ARROW_CHUNK_ROWS = 32_768


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


@dataclass(frozen=True)
class ReadPlan:
    """What the readers need of a source's validated options: plain values. Spark unpickles the source in a new Python
    planner process at every query start; holding the pydantic model would add pydantic's import to each start."""

    partitions: int
    max_events: int | None
    max_events_per_trigger: int | None
    rate: float
    rate_steps: str | None
    start_time: float | None  # None: pacing starts when the stream reader is made
    start_index: int

    @classmethod
    def of(cls, options: SourceOptions) -> ReadPlan:
        return cls(**{f.name: getattr(options, f.name) for f in fields(cls)})

    def offered(self, now: float, pacing_start: float) -> int:
        """Events offered by wall-clock time ``now`` (see :meth:`SourceOptions.offered`)."""
        start = self.start_time if self.start_time is not None else pacing_start
        return PacingAnchor(start, self.start_index, self.rate, self.rate_steps).offered(now, self.max_events)


class GeneratedStreamReader(DataSourceStreamReader):
    """Paced, replayable stream reader over an :class:`EventGenerator`."""

    def __init__(self, options: ReadPlan, generator: EventGenerator) -> None:
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

    def __init__(self, options: ReadPlan, generator: EventGenerator) -> None:
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
        from dagster_reconf.workloads.options import SourceOptions  # validated where Spark makes the source (ReadPlan)

        parsed = SourceOptions.parse(dict(options), self.source_name)
        self.plan, self.events = ReadPlan.of(parsed), self.generator(parsed)

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    @abstractmethod
    def generator(self, options: SourceOptions) -> EventGenerator:
        """The generator behind this source, from its options."""

    def schema(self) -> str:
        return spark_schema_ddl(self.events.schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratedStreamReader(self.plan, self.events)

    def reader(self, schema: Any) -> DataSourceReader:
        return GeneratedBatchReader(self.plan, self.events)


class NexmarkDataSource(_GeneratedSource):
    """``spark.readStream.format("nexmark")``: persons, auctions and bids (1:3:46)."""

    source_name = "nexmark"

    def generator(self, options: SourceOptions) -> EventGenerator:
        return NexmarkGenerator(seed=options.seed, event_time_rate=options.event_time_rate)


class WordsDataSource(_GeneratedSource):
    """``spark.readStream.format("words")``: sentences of words from a fixed vocabulary."""

    source_name = "words"

    def generator(self, options: SourceOptions) -> EventGenerator:
        return WordsGenerator(
            seed=options.seed,
            event_time_rate=options.event_time_rate,
            vocabulary=options.vocabulary,
            words_per_sentence=options.words_per_sentence,
        )


def register_sources(spark: SparkSession) -> None:
    """Register ``nexmark`` and ``words`` with a SparkSession (idempotent)."""
    spark.dataSource.register(NexmarkDataSource)
    spark.dataSource.register(WordsDataSource)
