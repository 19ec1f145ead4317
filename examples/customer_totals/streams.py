"""Running order totals per customer: a Python state function (``applyInPandasWithState``) over JSON files.

For each customer the state keeps its orders and amount so far; every micro-batch that brings a customer new orders
appends one row: the batch's orders and the running totals after them. The state function pays a simulated cost
per order (a slow lookup), so the stateful stage is where the work is: as many tasks as state partitions.

``check_output``: once the stream has read every file, the last running total of each customer must equal a batch
count over the files, and the per-batch orders must add up to it: state lost in a migration restarts a total, a batch
replayed twice or skipped shows in the sum.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pandas as pd
from pydantic import BaseModel, Field
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from dagster_reconf import OutputComparison, StreamContext, stream_definition

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Python workers get the state function by value

ORDER = "order_id long, customer long, amount double, ts timestamp"
OUTPUT = "customer long, orders long, total_orders long, total_amount double"
STATE = "orders long, amount double"


class CustomerTotalsOptions(BaseModel):
    """Where the orders arrive, where the totals go, and what each order costs in the state function."""

    input_dir: str = Field(..., description="Directory the JSON order files are dropped into.")
    output_dir: str = Field(..., description="Directory of the parquet output (Spark's file sink).")
    work_ms_per_order: float = Field(0.0, ge=0, description="Simulated work per order in the state function, in ms.")


def running_totals(work_ms: float):
    """The state function: add a batch's orders to the customer's totals, emit the batch's count and the totals."""

    def update(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        orders, amount = state.get if state.exists else (0, 0.0)
        batch = 0
        for frame in frames:
            time.sleep(len(frame) * work_ms / 1000.0)
            batch += len(frame)
            amount += float(frame["amount"].sum())
        orders += batch
        state.update((orders, amount))
        yield pd.DataFrame(
            {"customer": [int(key[0])], "orders": [batch], "total_orders": [orders], "total_amount": [amount]}
        )

    return update


@stream_definition(
    options=CustomerTotalsOptions,
    knob_options={"max_per_trigger": "maxFilesPerTrigger"},
    oracle=lambda spark, home, spec: check_output(spark, CustomerTotalsOptions(**spec.options)),
)
def customer_totals(spark: SparkSession, ctx: StreamContext):
    """Per customer, each batch's orders and the running totals after it."""
    orders = spark.readStream.format("json").schema(ORDER).options(**ctx.source_options).load(ctx.options.input_dir)
    totals = orders.groupBy("customer").applyInPandasWithState(
        running_totals(ctx.options.work_ms_per_order),
        outputStructType=OUTPUT,
        stateStructType=STATE,
        outputMode="append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )
    return totals.writeStream.outputMode("append").format("parquet").option("path", ctx.options.output_dir)


def check_output(spark: SparkSession, options: CustomerTotalsOptions) -> OutputComparison:
    """Per customer: the batch count over every file against the last running total and the sum of batch counts."""
    expected = spark.read.format("json").schema(ORDER).load(options.input_dir).groupBy("customer").count().toPandas()
    actual = (
        spark.read.parquet(options.output_dir)
        .groupBy("customer")
        .agg(F.max("total_orders").alias("last_total"), F.sum("orders").alias("summed"))
        .toPandas()
    )
    return totals_check(expected, actual)


def totals_check(expected: pd.DataFrame, actual: pd.DataFrame) -> OutputComparison:
    """``expected``: ``customer, count``; ``actual``: ``customer, last_total, summed``. An order is lost where the
    totals fall short of the count, duplicated where either exceeds it (a replayed batch adds to the sum; state that
    survived a replay that should not have adds to the total). Rows are orders: expected, the batch count; actual,
    the per-batch counts summed."""
    both = expected.merge(actual, on="customer", how="outer").fillna(0)
    short = (both["count"] - both[["last_total", "summed"]].min(axis=1)).clip(lower=0)
    over = (both[["last_total", "summed"]].max(axis=1) - both["count"]).clip(lower=0)
    return OutputComparison(int(both["count"].sum()), int(both["summed"].sum()), int(short.sum()), int(over.sum()))
