"""A user's Python data source whose offsets are opaque cursors, not counters: the control plane cannot tell its
backlog, and must say so rather than hold silently."""

import time

from pydantic import BaseModel
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from dagster_reconf import stream_definition


class _Range(InputPartition):
    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo, self.hi = lo, hi


class _TicksReader(DataSourceStreamReader):
    def __init__(self) -> None:
        self.started = time.time()

    def initialOffset(self) -> dict:
        return {"cursor": "tick-0"}

    def latestOffset(self) -> dict:
        return {"cursor": f"tick-{int((time.time() - self.started) * 20)}"}

    def partitions(self, start: dict, end: dict) -> list:
        lo, hi = (int(o["cursor"].split("-")[1]) for o in (start, end))
        return [_Range(lo, hi)] if hi > lo else []

    def read(self, partition):
        for i in range(partition.lo, partition.hi):
            yield (i,)

    def commit(self, end: dict) -> None:
        """Nothing to release."""


class TicksDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ticks"

    def schema(self) -> str:
        return "tick long"

    def streamReader(self, schema) -> DataSourceStreamReader:
        return _TicksReader()


class TickOptions(BaseModel):
    output_dir: str


@stream_definition(options=TickOptions)
def ticks(spark, ctx):
    """Ticks from an opaque-cursor source, counted per tick modulo 10."""
    spark.dataSource.register(TicksDataSource)
    counts = spark.readStream.format("ticks").load().selectExpr("tick % 10 AS bucket").groupBy("bucket").count()
    return counts.writeStream.outputMode("update").foreachBatch(
        lambda batch, batch_id: batch.write.mode("overwrite").parquet(f"{ctx.options.output_dir}/batch={batch_id}")
    )
