"""A user's stream whose oracle runs one slow Spark stage: an oracle process that outlives its bound."""

import time

from dagster_reconf import OutputComparison, stream_definition


def _stall(batches):
    time.sleep(600)
    yield from batches


def check_output(spark, home, spec) -> OutputComparison:
    spark.range(4, numPartitions=2).mapInArrow(_stall, "id long").count()
    return OutputComparison(0, 0, 0, 0)


@stream_definition(oracle=check_output)
def values(spark, ctx):
    """Rate-source values to the console (never started: only the oracle runs)."""
    return spark.readStream.format("rate").load().writeStream.format("console")
