"""A user's stream over Spark's rate source: every value, with its 5-second window, appended to parquet files."""

from pydantic import BaseModel, Field
from pyspark.sql import functions as F

from dagster_reconf import stream_definition


class RateOptions(BaseModel):
    rows_per_second: int = Field(50, ge=1)
    output_dir: str


@stream_definition(options=RateOptions)
def values(spark, ctx):
    """Rate-source values and their 5-second windows."""
    rows = spark.readStream.format("rate").option("rowsPerSecond", ctx.options.rows_per_second).load()
    out = rows.select("value", F.window("timestamp", "5 seconds").start.alias("window_start"))
    return out.writeStream.format("parquet").outputMode("append").option("path", ctx.options.output_dir)


@stream_definition(options=RateOptions)
def distinct_values(spark, ctx):
    """Rate-source values, each once (a stateful dropDuplicates), appended to parquet files: Spark's file sink over
    state that a migration moves."""
    rows = spark.readStream.format("rate").option("rowsPerSecond", ctx.options.rows_per_second).load()
    return (
        rows.withWatermark("timestamp", "1 hour")
        .dropDuplicates(["value"])
        .select("value")
        .writeStream.format("parquet")
        .outputMode("append")
        .option("path", ctx.options.output_dir)
    )
