"""PySpark Python data sources ``nexmark`` and ``words`` over the event generators.

Offsets are event indexes (``{"index": n}``), so any range can be replayed exactly
after a restart. Streaming reads are paced by the wall clock: at time ``t`` the
source offers ``start_index + (t - start_time) * rate`` events (capped by
``max_events``), so a job that falls behind builds a real backlog, and the backlog
keeps growing while the job is down, as it would with Kafka.

A *replay* (option ``replay_ends``) offers the batches of an earlier run again, with the
same boundaries, so stateful operators evict by watermark exactly as they did: that is
how a replay migration rebuilds state in a new checkpoint.

The *gate* is how the runtime stops a query at a micro-batch boundary: while the
file named by ``gate_file`` exists, ``latestOffset`` returns ``start`` (no new data),
so the running batch commits and no new data batch starts.

Batch reads (``spark.read.format("nexmark").option("max_events", n)``) return events
``[0, n)``: that is how the correctness oracle replays a stream as a batch job.
"""

from __future__ import annotations

import bisect
import os
import time
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from ..errors import SpecError
from .generator import EventGenerator, NexmarkGenerator, WordsGenerator
from .options import SourceOptions

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


class GeneratedStreamReader(DataSourceStreamReader):
    """Paced, gated, replayable stream reader over an :class:`EventGenerator`."""

    def __init__(self, options: SourceOptions, generator: EventGenerator) -> None:
        self.options = options
        self.generator = generator
        self.pacing_start = time.time()
        self.replay = options.replay_boundaries

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
        if self.replay:
            following = bisect.bisect_right(self.replay, begin)
            return {"index": self.replay[following] if following < len(self.replay) else begin}
        end = max(begin, self.options.offered(time.time(), self.pacing_start))
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + int(limit.max_rows))
        return {"index": end}

    def reportLatestOffset(self) -> dict:
        if self.replay:
            return {"index": self.replay[-1]}
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

    @abstractmethod
    def generator(self) -> EventGenerator:
        """The generator behind this source, from its options."""

    def schema(self) -> str:
        return spark_schema_ddl(self.generator().schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratedStreamReader(self.parsed, self.generator())

    def reader(self, schema: Any) -> DataSourceReader:
        return GeneratedBatchReader(self.parsed, self.generator())


class NexmarkDataSource(_GeneratedSource):
    """``spark.readStream.format("nexmark")``: persons, auctions and bids (1:3:46)."""

    source_name = "nexmark"

    def generator(self) -> EventGenerator:
        return NexmarkGenerator(seed=self.parsed.seed, event_time_rate=self.parsed.event_time_rate)


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
