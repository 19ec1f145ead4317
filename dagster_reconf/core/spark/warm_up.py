"""Small jobs that load, before a stream needs them, what its first batch on a new session or executor would load.

Each runs in scratch directories the runtime gives it, never in the stream's own checkpoint or sink.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.spark.python_task_overhead import same_batches
from dagster_reconf.core.spark.termination import await_termination, first_line
from dagster_reconf.core.store.storage import Location, spark_uri

__all__ = ["warm_up_file_write", "warm_up_job", "warm_up_state_query"]


def warm_up_job(spark: SparkSession, tasks: int) -> None:
    """A small job of ``tasks`` tasks that loads what a stream's first tasks would: a Python worker (Arrow batches
    through it), then a shuffle into a hash aggregation (the JVM's classes and generated code)."""
    frame = spark.range(0, 64 * tasks, numPartitions=tasks)
    frame.mapInArrow(same_batches, frame.schema).groupBy((F.col("id") % tasks).alias("key")).count().collect()


def warm_up_state_query(spark: SparkSession, tasks: int, checkpoint: Location) -> None:
    """One batch of a count per key over the rate source into Spark's noop sink, with the session's state store:
    it loads the store's native library and classes on the executors that run its tasks."""
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 64 * tasks)
        .option("numPartitions", tasks)
        .load()
    )
    query = (
        rows.groupBy((F.col("value") % (4 * tasks)).alias("key"))
        .count()
        .writeStream.format("noop")
        .queryName(f"warm-up-{checkpoint.name}")
        .outputMode("update")
        .trigger(once=True)
        .option("checkpointLocation", spark_uri(checkpoint))
        .start()
    )
    if not await_termination(query, 120.0):
        query.stop()
    if query.exception() is not None:
        raise StreamStateError(f"the state store warm-up query failed: {first_line(query.exception())}")


def warm_up_file_write(spark: SparkSession, tasks: int, directory: Location) -> None:
    """A small write in the session's default file format (parquet unless set): Spark's file sinks, and most
    ``foreachBatch`` writers, go through the same file writer, whose classes and generated code otherwise load in the
    first batch after a handover."""
    frame = spark.range(0, 64 * tasks, numPartitions=tasks).selectExpr("id", "CAST(id AS STRING) AS text")
    frame.write.mode("overwrite").save(spark_uri(directory))
