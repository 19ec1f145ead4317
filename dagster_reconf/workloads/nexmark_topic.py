"""Nexmark over a Kafka topic: a paced producer, Q5 and Q3 as streams over Spark's Kafka source, and their oracle.

Written as a user writes streams over their own topic (the public API only): :class:`NexmarkTopicWriter` writes the
bundled generator's events as JSON, keyed by the entity they are about (an auction's id for auctions and bids, a
person's id for persons), so a partition always holds the same keys. ``q5`` and ``q3`` read the topic through
``format("kafka")``, parse the events back into the generator's schema and run the bundled query into the idempotent
file sink (exactly once). Their oracle reads the topic itself, from the source's initial offsets to the checkpoint's
last committed ones, and runs the query as a batch job over exactly those records.

.. code-block:: python

    StreamSpec(name="nexmark-q5", entrypoint="dagster_reconf.workloads.nexmark_topic:q5",
               options={"bootstrap_servers": "127.0.0.1:9092", "topic": "nexmark"},
               kafka={"bootstrap_servers": "127.0.0.1:9092"},
               spark_conf={"spark.jars": spark_kafka_jars()})
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dagster_reconf.core.definition import StreamContext, StreamDefinition, stream_definition
from dagster_reconf.core.kafka.positions import Positions, committed_positions, replay_start_positions
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.generator import EVENT_AUCTION, EVENT_BID, NEXMARK_SCHEMA, NexmarkGenerator
from dagster_reconf.workloads.kafka import KafkaSetupError, TopicWriter
from dagster_reconf.workloads.options import CostSpec
from dagster_reconf.workloads.oracle import OutputComparison, compare_with_batch, last_watermark
from dagster_reconf.workloads.queries import QUERIES, QueryDefinition, RecordCost

__all__ = ["NexmarkTopicOptions", "NexmarkTopicWriter", "check_topic_output", "nexmark_events", "q3", "q5"]

KNOB_OPTIONS = {"max_per_trigger": "maxOffsetsPerTrigger", "source_partitions": "minPartitions"}


class NexmarkTopicOptions(BaseModel):
    """Which topic the events are in, and what each costs to process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str = Field(..., description="Kafka's bootstrap servers, host:port[,host:port].")
    topic: str = Field(..., description="The topic of Nexmark events (value: one event as JSON).")
    starting_offsets: str = Field("earliest", description="Kafka source startingOffsets for a new checkpoint.")
    cost: CostSpec = Field(default_factory=CostSpec, description="Extra work per event (the demo's simulated I/O).")


def _event_ddl() -> str:
    from dagster_reconf.workloads.sources import spark_schema_ddl

    return spark_schema_ddl(NEXMARK_SCHEMA)


def nexmark_events(records: Any) -> Any:
    """Kafka records (``value``: one event as JSON) as the generator's events (its schema, in its columns)."""
    from pyspark.sql import functions as F

    return records.select(F.from_json(F.col("value").cast("string"), _event_ddl()).alias("e")).select("e.*")


class NexmarkTopicWriter(TopicWriter):
    """The bundled generator's events ``0, 1, 2, ...`` written to a topic, keyed by auction or person id."""

    def __init__(self, bootstrap_servers: str, topic: str, seed: int = 42, event_time_rate: int = 1000) -> None:
        super().__init__(bootstrap_servers, topic)
        self.generator = NexmarkGenerator(seed=seed, event_time_rate=event_time_rate)

    def records(self, start: int, count: int) -> Iterator[tuple[bytes, bytes]]:
        for event in self.generator.batch(start, start + count).to_pylist():
            kind = event["event_type"]
            if kind == EVENT_AUCTION:
                key = event["auction"]["id"]
            else:
                key = event["bid"]["auction"] if kind == EVENT_BID else event["person"]["id"]
            yield str(key).encode(), json.dumps(event, default=_iso).encode()


def _iso(value: Any) -> str:
    return value.isoformat()  # the generator's timestamps (UTC, millisecond steps): from_json reads them back exactly


def _definition(query: QueryDefinition) -> StreamDefinition:
    def build(spark: Any, ctx: StreamContext) -> Any:

        options: NexmarkTopicOptions = ctx.options
        records = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", options.bootstrap_servers)
            .option("subscribe", options.topic)
            .option("startingOffsets", options.starting_offsets)
            .options(**ctx.source_options)
            .load()
        )
        return query.writer(nexmark_events(records), RecordCost(options.cost.mode, options.cost.micros_per_record), ctx)

    build.__name__ = build.__qualname__ = query.name
    build.__module__ = __name__
    return stream_definition(
        build,
        options=NexmarkTopicOptions,
        knob_options=KNOB_OPTIONS,
        code_versions=query.versions,
        frozen_options={"topic"},
        oracle=check_topic_output,
        description=f"{query.description} (from a Kafka topic)",
    )


def read_topic_values(bootstrap_servers: str, start: Positions, end: Positions, timeout_s: float = 120.0) -> list[str]:
    """Every record value from ``start`` up to (not including) ``end``, per partition, with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    wanted = {(t, p): (start.get(t, {}).get(p, 0), e) for t, parts in end.items() for p, e in parts.items()}
    pending = {tp for tp, (lo, hi) in wanted.items() if hi > lo}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "dagster-reconf-oracle",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    values: list[str] = []
    try:
        consumer.assign([TopicPartition(t, p, wanted[(t, p)][0]) for t, p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise KafkaSetupError(f"the oracle's read of {sorted(pending)} did not finish in {timeout_s} s")
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is not None:
                    raise KafkaSetupError(f"reading the topic for the oracle: {message.error()}")
                tp = (message.topic(), message.partition())
                if tp in pending and message.offset() < wanted[tp][1]:
                    values.append(message.value().decode())
                if tp in pending and message.offset() >= wanted[tp][1] - 1:
                    pending.discard(tp)
    finally:
        consumer.close()
    return values


def check_topic_output(spark: Any, home: Path | str, spec: Any) -> OutputComparison:
    """A stopped stream's committed output against its query over exactly the records its checkpoint committed (the
    topic is the stream's one source: source 0 of its checkpoint)."""
    paths = StreamPaths(Path(home).resolve(), spec.name)
    query = QUERIES[spec.entrypoint.rpartition(":")[2]]
    options = NexmarkTopicOptions.model_validate(spec.options)
    end = committed_positions(paths.checkpoint, [0]) or {}
    values = read_topic_values(options.bootstrap_servers, replay_start_positions(paths.checkpoint, 0, [0]), end)
    events = nexmark_events(spark.createDataFrame([(v,) for v in values], "value string"))
    return compare_with_batch(query, events, paths.work / "output", last_watermark(paths))


q5 = _definition(QUERIES["q5"])
q3 = _definition(QUERIES["q3"])
