"""A user's stream whose version 2 is a bad deploy: it starts, then fails in its first batch. Any version fails once
the file ``fail_marker`` names exists (a failure nobody planned)."""

from pathlib import Path

from pydantic import BaseModel
from pyspark.sql import DataFrame

from dagster_reconf import stream_definition


class Options(BaseModel):
    output_dir: str
    fail_marker: str | None = None


@stream_definition(options=Options, code_versions=("1", "2"))
def values(spark, ctx):
    """Rate-source values, each once, written per batch; version 2 cannot write."""
    output, version, marker = ctx.options.output_dir, ctx.code_version, ctx.options.fail_marker
    rows = spark.readStream.format("rate").option("rowsPerSecond", 20).load()

    def write(batch: DataFrame, batch_id: int) -> None:
        if version == "2":
            raise RuntimeError(f"version 2 cannot write batch {batch_id}: table 'values_v2' does not exist")
        if marker and Path(marker).exists():
            raise RuntimeError(f"batch {batch_id}: the disk under {output} is full")
        batch.write.mode("overwrite").json(f"{output}/batch={batch_id}")

    return rows.dropDuplicates(["value"]).select("value").writeStream.foreachBatch(write)
