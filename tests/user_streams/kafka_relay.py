"""A user's stream from one Kafka topic to another: the first click of each user, relayed through Spark's Kafka
sink (at-least-once), keyed by the user."""

from __future__ import annotations

from pydantic import BaseModel, Field
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dagster_reconf import StreamContext, stream_definition


class RelayOptions(BaseModel):
    bootstrap_servers: str = Field(..., description="Kafka's bootstrap servers.")
    source_topic: str = Field(..., description="Clicks in (key: the user).")
    sink_topic: str = Field(..., description="First clicks out (key: the user).")


@stream_definition(
    options=RelayOptions, knob_options={"max_per_trigger": "maxOffsetsPerTrigger", "source_partitions": "minPartitions"}
)
def first_clicks_relay(spark: SparkSession, ctx: StreamContext):
    """Each user's first click, written once to the sink topic (once unless a batch runs again)."""
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", ctx.options.bootstrap_servers)
        .option("subscribe", ctx.options.source_topic)
        .option("startingOffsets", "earliest")
        .options(**ctx.source_options)
        .load()
    )
    first = records.select(F.col("key").cast("string").alias("user"), "value").dropDuplicates(["user"])
    return (
        first.select(F.col("user").alias("key"), "value")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", ctx.options.bootstrap_servers)
        .option("topic", ctx.options.sink_topic)
    )
