"""Order totals from JSON files: a user's stream over Spark's own file source and file sink.

Per 10-second window and region: the orders (deduplicated by order id within the watermark)
and their total amount, appended once the watermark closes the window. Spark's file sink
writes exactly once through its metadata log.

What makes it a managed stream is one decorator: the control plane calls ``orders`` with the
SparkSession and a context, and sets the checkpoint, query name and trigger on what it
returns; ``ctx.source_options`` carries the batch-size knob as the file source's own
``maxFilesPerTrigger``. ``check_output`` is its oracle: the output against a batch job over
the same files (nothing lost, nothing duplicated).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from upath import UPath

from dagster_reconf import OutputComparison, StreamContext, stream_definition

SCHEMA = "order_id long, region string, amount double, ts timestamp"
WATERMARK = "5 seconds"
CUSTOMERS = 251  # the writer's orders come from this many customers


class OrdersOptions(BaseModel):
    """Where the orders arrive, where the totals go, and what each order costs to process."""

    input_dir: str = Field(..., description="Directory the JSON order files are dropped into.")
    output_dir: str = Field(..., description="Directory of the parquet output (Spark's file sink).")
    sleep_ms_per_order: float = Field(0.0, ge=0, description="Simulated I/O per order (a slow enrichment call).")


def totals(orders: DataFrame) -> DataFrame:
    """The query's logic, shared by the stream and the batch check (where duplicates are dropped over all input:
    the same result here, since a duplicate arrives in the same file as its original)."""
    if orders.isStreaming:
        unique = orders.withWatermark("ts", WATERMARK).dropDuplicatesWithinWatermark(["order_id"])
    else:
        unique = orders.dropDuplicates(["order_id"])
    return (
        unique.groupBy(F.window("ts", "10 seconds"), "region")
        .agg(F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("amount"))
        .select(F.col("window.start").alias("window_start"), "region", "orders", "amount")
    )


def _slow(sleep_ms: float):
    def pay(batches):
        for batch in batches:
            time.sleep(batch.num_rows * sleep_ms / 1000.0)
            yield batch

    return pay


def check_output(spark: SparkSession, home, spec) -> OutputComparison:
    """Compare what the (stopped) stream committed with the batch job over every file, at its last watermark."""
    from dagster_reconf import StreamSupervisor

    watermark = StreamSupervisor(home).status(spec.name).get("watermark")  # of the last batch it committed
    actual = spark.read.parquet(spec.options["output_dir"])  # the file sink's log says which files are committed
    return OutputComparison.of_frames(expected_totals(spark, spec.options["input_dir"], watermark), actual)


@stream_definition(options=OrdersOptions, knob_options={"max_per_trigger": "maxFilesPerTrigger"}, oracle=check_output)
def orders(spark: SparkSession, ctx: StreamContext):
    """Order totals per region and 10-second window, from JSON files."""
    events = spark.readStream.format("json").schema(SCHEMA).options(**ctx.source_options).load(ctx.options.input_dir)
    if ctx.options.sleep_ms_per_order > 0:
        events = events.mapInArrow(_slow(ctx.options.sleep_ms_per_order), events.schema)
    return totals(events).writeStream.outputMode("append").format("parquet").option("path", ctx.options.output_dir)


def expected_totals(spark: SparkSession, input_dir: str, watermark: str | None) -> DataFrame:
    """The batch job over every file: the windows the final watermark closed."""
    frame = totals(spark.read.format("json").schema(SCHEMA).load(input_dir))
    if watermark is None:
        return frame.limit(0)
    return frame.where(F.col("window_start") + F.expr("INTERVAL 10 SECONDS") <= F.lit(watermark).cast("timestamp"))


class OrderWriter:
    """Drops order files into a directory (a local one, or a URL such as ``s3a://bucket/orders/in``): ``rows`` orders
    per file, event time moving forward, a few duplicates."""

    ROWS = 50  # orders per file (and one duplicate)

    def __init__(self, directory: Path | str, rows: int = ROWS, start: float = 1_767_225_600.0) -> None:
        self.directory = UPath(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rows = rows
        self.files = 0
        self.start = start

    def write(self, files: int = 1) -> None:
        for _ in range(files):
            n = self.files
            lines = []
            for i in range(self.rows):
                order_id = n * self.rows + i
                ts = self.start + n * 2 + i * 2.0 / self.rows
                lines.append(
                    json.dumps(
                        {
                            "order_id": order_id,
                            "region": ["eu", "us", "apac"][order_id % 3],
                            "customer": order_id % CUSTOMERS,
                            "amount": float(order_id % 97),
                            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1000):03d}Z",
                        }
                    )
                )
            lines.append(lines[0])  # a duplicate delivery: dropped by dropDuplicatesWithinWatermark
            text, final = "\n".join(lines) + "\n", self.directory / f"orders-{n:06d}.json"
            if final.protocol in ("", "file", "local"):  # written aside, then renamed: the stream never sees a part
                tmp = self.directory / f".orders-{n:06d}.json.tmp"
                tmp.write_text(text)
                tmp.rename(final)
            else:  # an object store's put is whole (and a rename there is a copy)
                final.write_text(text)
            self.files += 1

    @contextmanager
    def keep_writing(self, every_s: float) -> Iterator["OrderWriter"]:
        """Drop a file every ``every_s`` seconds in the background while the block runs, on a fixed schedule: a write
        that took long (a busy machine) does not push the later ones back, so the files offered keep their rate."""
        stop = threading.Event()

        def run() -> None:
            due = time.monotonic()
            while True:
                due += every_s
                if stop.wait(max(0.0, due - time.monotonic())):
                    return
                self.write()

        thread = threading.Thread(target=run, name="order-writer", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
