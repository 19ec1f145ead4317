"""The bundled queries: Nexmark Q1, Q2, Q3, Q5, Q8, Q11 and word count.

Each query is one function from the source DataFrame to the result DataFrame, used
unchanged by the streaming job and by the batch oracle, so "the stream's output equals
the batch job's output" compares the same logic on the same events.

How results are compared (``output_mode`` and ``key_columns``):

* ``append`` queries emit each result row once; the stream's output is the multiset
  of all rows the sink committed.
* ``update`` queries emit the new value of every key a batch touched; the stream's
  output is the last value per key (``key_columns``), like a materialized view.
* ``final_after_watermark`` names the time column of ``append`` aggregations (Q11's
  session windows, which Spark supports only in append mode): a row is emitted once the
  watermark passes it, so the oracle compares the rows closed by the final watermark.

Code versions: a query's logic can change while the stream runs on (a new release of
the job), as long as its state schema stays compatible with the checkpoint. Each
query lists its versions (``code_versions``, ``"1"`` is :attr:`QueryDefinition.build`);
word count ships a compatible ``"2"`` (tokenizes on any whitespace: the same result on
generated sentences) and an incompatible ``"3"`` (also sums characters per word: a new
state value column), so reconfigurations can be tested both ways.

Watermarks never drop events here: the generators emit events in event-time order,
so every event is newer than the watermark of the batch before it.

The per-record cost knob (:class:`RecordCost`) runs before the query's operators, in
the source stage: ``cpu`` busy-spins (real CPU work), ``sleep`` waits (simulated I/O,
so scaling beyond the machine's 2 cores still changes throughput).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from dagster_reconf.core.errors import SpecError

if TYPE_CHECKING:  # pyspark is imported where a query is built, so the catalogue loads without it
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamWriter

    from dagster_reconf.core.definition import StreamContext
    from dagster_reconf.core.spec import StreamSpec

__all__ = ["ENTRYPOINT", "QUERIES", "QueryDefinition", "RecordCost", "get_query", "query_of"]

ENTRYPOINT = "dagster_reconf.workloads.streams:{}"  # where the bundled stream definitions are, by query name

CostMode = Literal["none", "cpu", "sleep"]


@dataclass(frozen=True)
class RecordCost:
    """Extra work per input record, applied in the source stage.

    Attributes:
        mode: ``none``, ``cpu`` (busy spin) or ``sleep`` (simulated wait).
        micros_per_record: cost of one record in microseconds.
    """

    mode: CostMode = "none"
    micros_per_record: float = 0.0

    def apply(self, events: DataFrame) -> DataFrame:
        """Return ``events`` with the cost paid per Arrow batch (rows unchanged)."""
        if self.mode == "none" or self.micros_per_record <= 0:
            return events
        mode, seconds_per_record = self.mode, self.micros_per_record / 1e6

        def pay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                seconds = batch.num_rows * seconds_per_record
                if mode == "sleep":
                    time.sleep(seconds)
                else:
                    deadline = time.perf_counter() + seconds
                    spins = 0
                    while time.perf_counter() < deadline:
                        spins += 1
                yield batch

        return events.mapInArrow(pay, events.schema)


@dataclass(frozen=True)
class QueryDefinition:
    """A bundled query.

    Attributes:
        name: the query's id (``q5``, ``wordcount``...).
        source: the data source format it reads (``nexmark`` or ``words``).
        output_mode: Spark output mode of the streaming job.
        key_columns: for ``update`` queries, the columns identifying a result row.
        stateful: whether the query keeps state (and so state partitions).
        description: one line for listings and the UI.
        build: events DataFrame -> result DataFrame.
        final_after_watermark: for append aggregations, the column a row is final after.
        code_versions: later versions of the logic, by version name (``"1"`` is ``build``).
    """

    name: str
    source: Literal["nexmark", "words"]
    output_mode: Literal["append", "update"]
    key_columns: tuple[str, ...]
    stateful: bool
    description: str
    build: Callable[[DataFrame], DataFrame]
    final_after_watermark: str | None = None
    code_versions: Mapping[str, Callable[[DataFrame], DataFrame]] = field(default_factory=dict)

    @property
    def versions(self) -> list[str]:
        """Every code version, oldest first."""
        return ["1", *self.code_versions]

    def builder(self, version: str = "1") -> Callable[[DataFrame], DataFrame]:
        """The logic of ``version``.

        Raises:
            SpecError: the query has no such version.
        """
        if version == "1":
            return self.build
        try:
            return self.code_versions[version]
        except KeyError:
            raise SpecError(
                f"query {self.name!r} has no code version {version!r}; versions: {', '.join(self.versions)}"
            ) from None

    def writer(self, events: DataFrame, cost: RecordCost, ctx: StreamContext) -> DataStreamWriter:
        """The logic of ``ctx.code_version`` over ``events`` (each paying ``cost``), into the idempotent file sink
        under the stream's work directory: what every bundled stream returns, whatever its source."""
        from dagster_reconf.workloads.sink import BatchFileSink

        output = (ctx.work_dir / "output").resolve().as_uri()
        return (
            self.builder(ctx.code_version)(cost.apply(events))
            .writeStream.outputMode(self.output_mode)
            .foreachBatch(BatchFileSink(output))
        )


WATERMARK_DELAY = "2 seconds"


def _bids(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return events.where(F.col("event_type") == 2).select("bid.*")


def _persons(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return events.where(F.col("event_type") == 0).select("person.*")


def _auctions(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return events.where(F.col("event_type") == 1).select("auction.*")


def q1_currency(events: DataFrame) -> DataFrame:
    """Bids with the price converted from dollars to euros."""
    from pyspark.sql import functions as F

    return _bids(events).select("auction", "bidder", (F.col("price") * 0.908).alias("price_eur"), "date_time")


def q2_selection(events: DataFrame) -> DataFrame:
    """Bids on a fixed subset of auctions (auction id divisible by 123)."""
    from pyspark.sql import functions as F

    return _bids(events).where(F.col("auction") % 123 == 0).select("auction", "price")


def q3_local_item_suggestion(events: DataFrame) -> DataFrame:
    """Incremental join: sellers in OR, ID or CA with their auctions in category 10."""
    from pyspark.sql import functions as F

    persons = (
        _persons(events)
        .where(F.col("state").isin("OR", "ID", "CA"))
        .select(F.col("id").alias("person_id"), "name", "city", "state")
    )
    auctions = _auctions(events).where(F.col("category") == 10).select(F.col("id").alias("auction_id"), "seller")
    return auctions.join(persons, auctions.seller == persons.person_id, "inner").select(
        "name", "city", "state", "auction_id"
    )


def q5_hot_items(events: DataFrame) -> DataFrame:
    """Bids per auction in sliding windows (10 s every 2 s): the counts behind "hot items"."""
    from pyspark.sql import functions as F

    counts = (
        _bids(events)
        .withWatermark("date_time", WATERMARK_DELAY)
        .groupBy(F.window("date_time", "10 seconds", "2 seconds"), "auction")
        .agg(F.count(F.lit(1)).alias("bids"))
    )
    return counts.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "auction", "bids"
    )


def q8_new_users(events: DataFrame) -> DataFrame:
    """Persons who opened an auction in the same 10 s tumbling window they joined in."""
    from pyspark.sql import functions as F

    persons = (
        _persons(events)
        .withWatermark("date_time", WATERMARK_DELAY)
        .select(F.col("id").alias("person_id"), "name", F.window("date_time", "10 seconds").alias("p_window"))
    )
    auctions = (
        _auctions(events)
        .withWatermark("date_time", WATERMARK_DELAY)
        .select(F.col("id").alias("auction_id"), "seller", F.window("date_time", "10 seconds").alias("a_window"))
    )
    joined = persons.join(
        auctions, (persons.person_id == auctions.seller) & (persons.p_window == auctions.a_window), "inner"
    )
    return joined.select("person_id", "name", F.col("p_window.start").alias("window_start"), "auction_id")


def q11_user_sessions(events: DataFrame) -> DataFrame:
    """Bids per bidder per session (a session ends after 10 s without a bid)."""
    from pyspark.sql import functions as F

    sessions = (
        _bids(events)
        .withWatermark("date_time", WATERMARK_DELAY)
        .groupBy(F.session_window("date_time", "10 seconds"), "bidder")
        .agg(F.count(F.lit(1)).alias("bids"))
    )
    return sessions.select(
        "bidder",
        F.col("session_window.start").alias("session_start"),
        F.col("session_window.end").alias("session_end"),
        "bids",
    )


def word_count(events: DataFrame) -> DataFrame:
    """Running count per word."""
    from pyspark.sql import functions as F

    words = events.select(F.explode(F.split("sentence", " ")).alias("word"))
    return words.groupBy("word").agg(F.count(F.lit(1)).alias("count"))


def word_count_any_whitespace(events: DataFrame) -> DataFrame:
    """Word count v2: splits on any run of whitespace (same state schema as v1)."""
    from pyspark.sql import functions as F

    words = events.select(F.explode(F.split(F.trim("sentence"), r"\s+")).alias("word"))
    return words.groupBy("word").agg(F.count(F.lit(1)).alias("count"))


def word_count_with_characters(events: DataFrame) -> DataFrame:
    """Word count v3: also sums the characters per word (a new state value column: incompatible)."""
    from pyspark.sql import functions as F

    words = events.select(F.explode(F.split("sentence", " ")).alias("word"))
    return words.groupBy("word").agg(F.count(F.lit(1)).alias("count"), F.sum(F.length("word")).alias("characters"))


QUERIES: dict[str, QueryDefinition] = {
    q.name: q
    for q in [
        QueryDefinition("q1", "nexmark", "append", (), False, "Nexmark Q1: currency conversion (map)", q1_currency),
        QueryDefinition("q2", "nexmark", "append", (), False, "Nexmark Q2: selection (filter)", q2_selection),
        QueryDefinition(
            "q3", "nexmark", "append", (), True, "Nexmark Q3: incremental person-auction join", q3_local_item_suggestion
        ),
        QueryDefinition(
            "q5",
            "nexmark",
            "update",
            ("window_start", "window_end", "auction"),
            True,
            "Nexmark Q5: hot items (sliding-window count)",
            q5_hot_items,
        ),
        QueryDefinition(
            "q8", "nexmark", "append", (), True, "Nexmark Q8: new users (tumbling-window join)", q8_new_users
        ),
        QueryDefinition(
            "q11",
            "nexmark",
            "append",
            (),
            True,
            "Nexmark Q11: user sessions (session window)",
            q11_user_sessions,
            final_after_watermark="session_end",
        ),
        QueryDefinition(
            "wordcount",
            "words",
            "update",
            ("word",),
            True,
            "Word count (stateful count by word)",
            word_count,
            code_versions={"2": word_count_any_whitespace, "3": word_count_with_characters},
        ),
    ]
}


def get_query(name: str) -> QueryDefinition:
    """Look a bundled query up by name, with the list of valid names on a miss."""
    try:
        return QUERIES[name]
    except KeyError:
        raise SpecError(f"unknown query {name!r}; bundled queries: {', '.join(QUERIES)}") from None


def query_of(spec: StreamSpec) -> QueryDefinition:
    """The bundled query a spec's entrypoint names."""
    name = spec.entrypoint.rpartition(":")[2]
    if not spec.entrypoint.startswith(ENTRYPOINT.format("")) or name not in QUERIES:
        raise ValueError(f"stream {spec.name!r} runs {spec.entrypoint}, not a bundled query")
    return QUERIES[name]
