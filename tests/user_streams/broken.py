"""Stream definitions that go wrong in every way a user's code can: the control plane must say what and where."""

from pydantic import BaseModel, Field

from dagster_reconf import stream_definition


class Options(BaseModel):
    path: str = Field(..., description="Where the input is.")
    rows_per_second: int = Field(10, ge=1)


@stream_definition(options=Options, code_versions=["1", "2"])
def with_options(spark, ctx):
    """Well-formed; its options are checked."""
    return spark.readStream.format("rate").load().writeStream.format("noop")


def raises(spark, ctx):
    raise RuntimeError("cannot reach the schema registry")


def wrong_type(spark, ctx):
    return spark.readStream.format("rate").load()  # a DataFrame, not a writer


def fails_in_first_batch(spark, ctx):
    from pyspark.sql import functions as F

    rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    return rows.select(F.raise_error(F.lit("bad record in the first batch"))).writeStream.format("noop")


NOT_A_FUNCTION = 42


def one_argument(spark):
    return None
