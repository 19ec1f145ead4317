"""A user's stream over their own Python data source with admission control, as in Spark's streaming examples: the
source admits at most ``max_rows_per_batch`` rows a batch (``getDefaultReadLimit`` returns ``ReadMaxRows``) of the
rows it offers at ``rows_per_second`` from ``start_time`` on. Every row's value, once, to parquet files.

``capped_rows`` maps the ``max_per_trigger`` knob onto the source's option (plans may set it); ``own_cap_rows`` sets
the option itself from ``options.cap`` (the user's code: plans say what to raise). ``check_output`` is the oracle:
every value up to what the checkpoint's last batch read, once."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from dagster_reconf import OutputComparison, stream_definition

SCHEMA = "value long"


class CappedOptions(BaseModel):
    rows_per_second: float = Field(50.0, gt=0)
    start_time: float = Field(..., description="When the source began offering rows (epoch seconds).")
    output_dir: str
    cap: int = Field(20, ge=1, description="own_cap_rows: the rows a batch admits, set in the definition itself.")


class PacedReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.rate = float(options.get("rows_per_second", "50"))
        self.start = float(options["start_time"])
        self.max_rows = int(options["max_rows_per_batch"]) if "max_rows_per_batch" in options else None

    def _offered(self) -> int:
        return max(0, int((time.time() - self.start) * self.rate))

    def initialOffset(self) -> dict:
        return {"row": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = max(int(start["row"]), self._offered())
        if isinstance(limit, ReadMaxRows):
            end = min(end, int(start["row"]) + int(limit.max_rows))
        return {"row": end}

    def reportLatestOffset(self) -> dict:
        return {"row": self._offered()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((int(start["row"]), int(end["row"])))]

    def read(self, partition: InputPartition):
        lo, hi = partition.value
        for value in range(lo, hi):
            yield (value,)

    def commit(self, end: dict) -> None:
        """Nothing to release: rows are made from their number."""


class PacedSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "paced_rows"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return PacedReader(self.options)


def check_output(spark, home, spec) -> OutputComparison:
    """Every value the checkpoint's batches read, once: values [0, end of the last committed batch)."""
    import json

    from dagster_reconf.core.store.checkpoint import checkpoint_facts
    from dagster_reconf.core.store.paths import StreamPaths

    paths = StreamPaths(home, spec.name)
    last = checkpoint_facts(paths.checkpoint).last_committed_batch
    offsets = (paths.checkpoint / "offsets" / str(last)).read_text().splitlines()
    end = int(json.loads(offsets[-1])["row"])
    values = spark.read.parquet(spec.options["output_dir"])
    counts = {
        row["value"]: row["n"] for row in values.groupBy("value").count().withColumnRenamed("count", "n").collect()
    }
    lost = sum(1 for v in range(end) if v not in counts)
    duplicated = sum(n - 1 for n in counts.values())
    return OutputComparison(end, sum(counts.values()), lost, duplicated)


def _rows(spark, ctx, extra: dict[str, str]):
    spark.dataSource.register(PacedSource)
    options = {"rows_per_second": str(ctx.options.rows_per_second), "start_time": str(ctx.options.start_time)}
    frame = spark.readStream.format("paced_rows").options(**options, **extra, **ctx.source_options).load()
    return frame.writeStream.format("parquet").option("path", ctx.options.output_dir)


@stream_definition(options=CappedOptions, knob_options={"max_per_trigger": "max_rows_per_batch"}, oracle=check_output)
def capped_rows(spark, ctx):
    """The source's cap is the max_per_trigger knob."""
    return _rows(spark, ctx, {})


@stream_definition(options=CappedOptions, oracle=check_output)
def own_cap_rows(spark, ctx):
    """The source's cap is set here, in the user's code."""
    return _rows(spark, ctx, {"max_rows_per_batch": str(ctx.options.cap)})


class CappedFilesOptions(BaseModel):
    input_dir: str
    output_dir: str
    cap: int = Field(1, ge=1, description="maxFilesPerTrigger, set in the definition itself.")


def check_files(spark, home, spec) -> OutputComparison:
    """Every value of every input file, once (run it once the stream read them all)."""
    expected = spark.read.schema(SCHEMA).json(spec.options["input_dir"])
    return OutputComparison.of_frames(expected, spark.read.parquet(spec.options["output_dir"]))


@stream_definition(options=CappedFilesOptions, oracle=check_files)
def own_cap_files(spark, ctx):
    """JSON files of values, at most ``cap`` a batch (the user's maxFilesPerTrigger), to parquet files."""
    files = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", ctx.options.cap).json(ctx.options.input_dir)
    return files.writeStream.format("parquet").option("path", ctx.options.output_dir)


class CappedTopicOptions(BaseModel):
    bootstrap_servers: str
    topic: str
    output_dir: str
    cap: int = Field(50, ge=1, description="maxOffsetsPerTrigger, set in the definition itself.")


def _topic(spark, options: CappedTopicOptions, streaming: bool):
    reader = spark.readStream if streaming else spark.read
    frame = (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", options.bootstrap_servers)
        .option("subscribe", options.topic)
        .option("startingOffsets", "earliest")
    )
    if streaming:
        frame = frame.option("maxOffsetsPerTrigger", options.cap)
    else:
        frame = frame.option("endingOffsets", "latest")
    return frame.load().select("partition", "offset")


def check_topic(spark, home, spec) -> OutputComparison:
    """Every record of the topic, once, by partition and offset (run it once the stream read them all)."""
    options = CappedTopicOptions(**spec.options)
    return OutputComparison.of_frames(_topic(spark, options, False), spark.read.parquet(options.output_dir))


@stream_definition(options=CappedTopicOptions, oracle=check_topic)
def own_cap_topic(spark, ctx):
    """Each record's partition and offset, at most ``cap`` offsets a batch (the user's maxOffsetsPerTrigger)."""
    return _topic(spark, ctx.options, True).writeStream.format("parquet").option("path", ctx.options.output_dir)
