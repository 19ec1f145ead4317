"""First click per user, from a Kafka topic: a user's stream over Spark's Kafka source and file sink.

Every record of the topic is a click keyed by its user; the stream keeps, for each user, the
first click ever seen (``dropDuplicates`` on the key: state that grows with the users and must
survive every migration), and appends it once to parquet through Spark's file sink. Kafka
keeps one key in one partition, in offset order, so "first" is well defined: the click with
the lowest offset of its user. ``check_output`` compares the stream's output with that batch
job over the whole topic (Spark's batch Kafka read): a state row lost in a migration shows as
a duplicated user, a batch replayed twice or skipped as a duplicated or lost one.

What makes it a managed stream is one decorator; ``knob_options`` maps the control plane's
batch-size and source-partitions knobs onto the Kafka source's own ``maxOffsetsPerTrigger`` and
``minPartitions``. The spec carries the connector in ``spark_conf`` (``spark.jars`` or
``spark.jars.packages``).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dagster_reconf import OutputComparison, StreamContext, stream_definition

CLICK = "user string, page string, seq long"


class ClicksOptions(BaseModel):
    """Which topic to read and where the first clicks go."""

    bootstrap_servers: str = Field(..., description="Kafka's bootstrap servers, host:port[,host:port].")
    topic: str = Field(..., description="The topic of clicks (key: the user; value: JSON).")
    output_dir: str = Field(..., description="Directory of the parquet output (Spark's file sink).")
    starting_offsets: str = Field("earliest", description="Kafka source startingOffsets for a new checkpoint.")
    work_ms_per_click: float = Field(0.0, ge=0, description="Simulated work per click (a slow lookup), in ms.")


def clicks(records: DataFrame) -> DataFrame:
    """Kafka records as clicks, with where they were in the topic."""
    value = F.from_json(F.col("value").cast("string"), CLICK)
    return records.select(
        F.col("key").cast("string").alias("user"),
        value["page"].alias("page"),
        value["seq"].alias("seq"),
        "partition",
        "offset",
    )


@stream_definition(
    options=ClicksOptions,
    knob_options={"max_per_trigger": "maxOffsetsPerTrigger", "source_partitions": "minPartitions"},
    oracle=lambda spark, home, spec: check_output(spark, spec),
)
def first_clicks(spark: SparkSession, ctx: StreamContext):
    """The first click of every user, appended once."""
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", ctx.options.bootstrap_servers)
        .option("subscribe", ctx.options.topic)
        .option("startingOffsets", ctx.options.starting_offsets)
        .options(**ctx.source_options)
        .load()
    )
    parsed = clicks(records)
    if ctx.options.work_ms_per_click > 0:
        parsed = parsed.mapInArrow(_slow(ctx.options.work_ms_per_click), parsed.schema)
    first = parsed.dropDuplicates(["user"])
    return first.writeStream.outputMode("append").format("parquet").option("path", ctx.options.output_dir)


def _slow(work_ms: float):
    def work(batches):
        for batch in batches:
            time.sleep(batch.num_rows * work_ms / 1000.0)
            yield batch

    return work


def expected_first_clicks(spark: SparkSession, bootstrap_servers: str, topic: str) -> DataFrame:
    """The batch job: the lowest-offset click of every user over the whole topic."""
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rank = F.row_number().over(Window.partitionBy("user").orderBy("offset"))
    return clicks(records).withColumn("rank", rank).where("rank = 1").drop("rank")


def check_output(spark: SparkSession, spec) -> OutputComparison:
    """The stream's committed output against the batch job, as multisets of rows (run it after the stream drained)."""
    options = ClicksOptions(**spec.options)
    actual = spark.read.parquet(options.output_dir)  # the file sink's log says which files are committed
    expected = expected_first_clicks(spark, options.bootstrap_servers, options.topic).select(*actual.columns)
    return OutputComparison.of_frames(expected, actual)


class ClickProducer:
    """Writes clicks to a topic with confluent-kafka: half by new users, half by users seen before."""

    def __init__(self, bootstrap_servers: str, topic: str, seed: int = 7) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.sent = 0
        self._random = random.Random(seed)
        self._producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": True})

    def write(self, count: int) -> None:
        for _ in range(count):
            seq = self.sent
            user = f"u{seq}" if seq % 2 == 0 or seq < 2 else f"u{self._random.randrange(0, seq, 2)}"
            value = json.dumps({"page": f"/p/{seq % 97}", "seq": seq})
            self._producer.produce(self.topic, key=user.encode(), value=value.encode())
            self.sent += 1
        if self._producer.flush(30) != 0:
            raise RuntimeError(f"{self.topic}: clicks still unsent after 30 s")

    @contextmanager
    def keep_writing(self, per_second: int, every_s: float = 0.25) -> Iterator[ClickProducer]:
        """Write ``per_second`` clicks a second in the background while the block runs."""
        stop = threading.Event()

        def run() -> None:
            started, due = time.monotonic(), 0
            while not stop.wait(every_s):
                target = int((time.monotonic() - started) * per_second)
                self.write(target - due)
                due = target

        thread = threading.Thread(target=run, name="click-producer", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()


def main(argv: list[str] | None = None) -> int:
    """``python -m examples.kafka_clicks.streams check --home H --stream NAME``: the oracle in a session of its own
    (with the connector on its classpath), printed as one JSON line."""
    import argparse

    from dagster_reconf import StreamSpec, StreamSupervisor

    parser = argparse.ArgumentParser(prog="examples.kafka_clicks.streams")
    parser.add_argument("action", choices=["check"])
    parser.add_argument("--home", required=True)
    parser.add_argument("--stream", required=True)
    args = parser.parse_args(argv)
    spec = StreamSpec.parse(json.loads(StreamSupervisor(args.home).require(args.stream).spec.read_text()))
    builder = SparkSession.builder.master("local[2]").appName("kafka-clicks-check").config("spark.ui.enabled", "false")
    for key, value in spec.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        print(json.dumps(asdict(check_output(spark, spec))))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
