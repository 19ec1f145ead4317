"""A user's stream that sets its own trigger (option ``trigger``: ``none``, ``processingTime=7 seconds``,
``availableNow``, ``once``, ``continuous=2 seconds``, ``realTime=5 seconds``): rate-source values to parquet files."""

from pydantic import BaseModel, Field

from dagster_reconf import stream_definition


class TriggerOptions(BaseModel):
    trigger: str = Field("none", description="The trigger the definition sets, as keyword=value.")
    output_dir: str


@stream_definition(options=TriggerOptions)
def values(spark, ctx):
    """Rate-source values, under the trigger the user chose."""
    writer = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .load()
        .select("value")
        .writeStream.format("parquet")
        .option("path", ctx.options.output_dir)
    )
    keyword, _, value = ctx.options.trigger.partition("=")
    if keyword == "none":
        return writer
    return writer.trigger(**{keyword: value or True})
