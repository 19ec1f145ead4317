"""Events per 10-second window from Spark's rate source, with a per-event cost: a user's windowed aggregation.

The rate source numbers its rows 0, 1, 2, ... and stamps them in order, so the windows the watermark closes hold
consecutive runs of values. Each output row says how many events its window counted and its lowest and highest
value; ``check_output`` reads the committed windows back and counts every value missing between them (lost) or
counted twice (duplicated). ``knob_options`` maps the control plane's source-partitions knob onto the rate source's
``numPartitions``.
"""

from __future__ import annotations

import time

import pandas as pd
from pydantic import BaseModel, Field
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dagster_reconf import OutputComparison, StreamContext, stream_definition

WINDOW = "10 seconds"
WATERMARK = "5 seconds"


class RateWindowsOptions(BaseModel):
    """What the rate source offers, what each event costs, where the windows go."""

    rows_per_second: int = Field(..., ge=1, description="The rate source's rowsPerSecond.")
    output_dir: str = Field(..., description="Directory of the parquet output (Spark's file sink).")
    work_ms_per_event: float = Field(0.0, ge=0, description="Simulated work per event (a slow lookup), in ms.")


@stream_definition(
    options=RateWindowsOptions,
    knob_options={"source_partitions": "numPartitions"},
    oracle=lambda spark, home, spec: check_output(spark, spec.options["output_dir"]),
)
def window_counts(spark: SparkSession, ctx: StreamContext):
    """Events per window, with the first and last value each window counted."""
    rows = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", ctx.options.rows_per_second)
        .options(**ctx.source_options)
        .load()
    )
    if ctx.options.work_ms_per_event > 0:
        rows = rows.mapInArrow(_slow(ctx.options.work_ms_per_event), rows.schema)
    counts = (
        rows.withWatermark("timestamp", WATERMARK)
        .groupBy(F.window("timestamp", WINDOW))
        .agg(F.count(F.lit(1)).alias("events"), F.min("value").alias("first"), F.max("value").alias("last"))
        .select(F.col("window.start").alias("window_start"), "events", "first", "last")
    )
    return counts.writeStream.outputMode("append").format("parquet").option("path", ctx.options.output_dir)


def _slow(work_ms: float):
    def work(batches):
        for batch in batches:
            time.sleep(batch.num_rows * work_ms / 1000.0)
            yield batch

    return work


def check_output(spark: SparkSession, output_dir: str) -> OutputComparison:
    """Count the values the committed windows miss or count twice (the file sink's log says which files count)."""
    frame = spark.read.parquet(output_dir).toPandas()
    return window_check(frame)


def window_check(frame: pd.DataFrame) -> OutputComparison:
    """Each window must count ``last - first + 1`` events, and start right after the previous window's last value
    (the first at 0); a window written twice counts all its events twice. Rows are values: expected, every value up
    to the last window's last; actual, the events the windows counted."""
    if frame.empty:
        return OutputComparison(0, 0, 0, 0)
    frame = frame.sort_values(["window_start", "first"]).reset_index(drop=True)
    repeated = frame.duplicated("window_start")
    span = frame["last"] - frame["first"] + 1
    inside = frame["events"] - span  # > 0: counted twice inside the window; < 0: missing inside it
    unique = frame[~repeated]
    follows = unique["first"] - unique["last"].shift(fill_value=-1) - 1  # > 0: a gap; < 0: an overlap
    lost = int(inside[~repeated].clip(upper=0).abs().sum() + follows.clip(lower=0).sum())
    duplicated = int(inside[~repeated].clip(lower=0).sum() + follows.clip(upper=0).abs().sum())
    duplicated += int(frame.loc[repeated, "events"].sum())
    return OutputComparison(int(unique["last"].max()) + 1, int(frame["events"].sum()), lost, duplicated)
