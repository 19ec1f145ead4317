"""A user's stream whose batches take a while: rate-source values through a slow step, written per batch id
(an idempotent ``foreachBatch`` writer), optionally followed by a slow second job in the same batch."""

import time

from pydantic import BaseModel, Field

from dagster_reconf import stream_definition


class SlowOptions(BaseModel):
    rows_per_second: int = Field(20, ge=1)
    output_dir: str
    seconds_before_write: float = Field(1.5, ge=0)  # a slow step before the sink's write job
    seconds_after_write: float = Field(0.0, ge=0)  # a slow second job after it (the batch has written by then)


def _sleeping(seconds: float):
    def pay(batches):
        time.sleep(seconds)
        yield from batches

    return pay


@stream_definition(options=SlowOptions)
def values(spark, ctx):
    """Rate-source values, written to ``output_dir/batch=N`` (overwritten when a batch runs again)."""
    options = ctx.options
    rows = spark.readStream.format("rate").option("rowsPerSecond", options.rows_per_second).load().select("value")
    slow = rows.mapInArrow(_sleeping(options.seconds_before_write), rows.schema)

    def write(batch, batch_id):
        batch.write.mode("overwrite").parquet(f"{options.output_dir}/batch={batch_id}")
        if options.seconds_after_write:
            batch.sparkSession.range(1).mapInArrow(_sleeping(options.seconds_after_write), "id long").count()

    return slow.writeStream.foreachBatch(write)
