"""One small stateful stream per source kind Spark ships, into the sink asked for: a user's code, not ours.

Every source yields ``id``s that are unique and, for the generated ones, contiguous from 0; the query keeps each id
once (a stateful ``dropDuplicates``) and writes it out. So the output says what was lost (a gap, or a file's id
missing) and what was duplicated (an id twice), whatever happened to the stream in between.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, Field
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from dagster_reconf import stream_definition

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Python workers get the source by value, no PYTHONPATH

SourceKind = Literal["json", "parquet", "text", "rate", "rate-micro-batch", "python", "socket", "memory"]
SinkKind = Literal["file", "foreachBatch", "console", "memory"]


class ZooOptions(BaseModel):
    source: SourceKind
    sink: SinkKind
    output_dir: str
    input_dir: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    rows_per_second: int = Field(20, ge=1)


class CountingSource(DataSource):
    """``spark.readStream.format("zoo_counter")``: ids 0, 1, 2, ... at ``rows_per_second`` since ``start``."""

    @classmethod
    def name(cls) -> str:
        return "zoo_counter"

    def schema(self) -> str:
        return "id long"

    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        return CountingReader(float(self.options["start"]), int(self.options["rows_per_second"]))


class IdRange(InputPartition):
    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo, self.hi = lo, hi


class CountingReader(DataSourceStreamReader):
    def __init__(self, start: float, rate: int) -> None:
        self.start, self.rate = start, rate

    def initialOffset(self) -> dict:  # noqa: N802
        return {"index": 0}

    def latestOffset(self) -> dict:  # noqa: N802
        return {"index": int((time.time() - self.start) * self.rate)}

    def partitions(self, start: dict, end: dict) -> list[IdRange]:
        return [IdRange(int(start["index"]), int(end["index"]))]

    def read(self, partition: IdRange) -> Iterator[tuple[int]]:  # type: ignore[override]
        for i in range(partition.lo, partition.hi):
            yield (i,)


def ids(spark: SparkSession, options: ZooOptions) -> DataFrame:
    """The source's rows as ``id``s."""
    if options.source in ("json", "parquet"):
        return spark.readStream.schema("id long").format(options.source).load(options.input_dir)
    if options.source == "text":
        return spark.readStream.text(options.input_dir).select(F.col("value").cast("long").alias("id"))
    if options.source == "rate":
        reader = spark.readStream.format("rate").option("rowsPerSecond", options.rows_per_second)
        return reader.load().select(F.col("value").alias("id"))
    if options.source == "rate-micro-batch":
        reader = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", options.rows_per_second)
        return reader.load().select(F.col("value").alias("id"))
    if options.source == "python":
        spark.dataSource.register(CountingSource)
        reader = spark.readStream.format("zoo_counter").option("rows_per_second", options.rows_per_second)
        return reader.option("start", str(_STARTED)).load()
    if options.source == "memory":
        return memory_ids(spark, options.rows_per_second)
    reader = spark.readStream.format("socket").option("host", "127.0.0.1").option("port", options.port)
    return reader.load().select(F.col("value").cast("long").alias("id"))


def memory_ids(spark: SparkSession, rows_per_second: int) -> DataFrame:
    """Spark's ``MemoryStream`` (no PySpark API: through the JVM), fed ids by a thread until the session stops."""
    jvm = spark._jvm
    companion = getattr(jvm, "org.apache.spark.sql.execution.streaming.runtime.MemoryStream$")
    stream = companion.__getattr__("MODULE$").apply(jvm.org.apache.spark.sql.Encoders.STRING(), spark._jsparkSession)
    as_scala = jvm.scala.jdk.javaapi.CollectionConverters.asScala

    def feed() -> None:
        sent, deadline = 0, time.monotonic() + 300
        try:
            while time.monotonic() < deadline and not spark.sparkContext._jsc.sc().isStopped():
                rows = [str(i) for i in range(sent, sent + max(1, rows_per_second // 10))]
                stream.addData(as_scala(jvm.java.util.ArrayList(rows)).toSeq())
                sent += len(rows)
                time.sleep(0.1)
        except Exception:  # noqa: BLE001 - the session went away under the feeder
            return

    threading.Thread(target=feed, daemon=True, name="zoo-memory-feeder").start()
    return DataFrame(stream.toDF(), spark).select(F.col("value").cast("long").alias("id"))


_STARTED = time.time()


@stream_definition(options=ZooOptions)
def zoo(spark, ctx):
    """Each id once (stateful), into the sink asked for."""
    options: ZooOptions = ctx.options
    unique = ids(spark, options).dropDuplicates(["id"])
    writer = unique.writeStream.outputMode("append")
    if options.sink == "file":
        return writer.format("json").option("path", options.output_dir)
    if options.sink == "foreachBatch":
        output = options.output_dir

        def write(batch: DataFrame, batch_id: int) -> None:  # idempotent by batch id: a replay overwrites
            batch.write.mode("overwrite").json(f"{output}/batch={batch_id}")

        return writer.foreachBatch(write)
    return writer.format(options.sink)  # console, memory
