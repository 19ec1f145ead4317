"""Turn a user's stream definition into a started query: the control plane's part (context, checkpoint, name,
trigger) around the user's (source, logic, sink), with errors that say whose code failed and how to fix it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from dagster_reconf.core.definition import StreamContext, StreamDefinition, StreamOutput
from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.spark.termination import first_line
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.storage import spark_uri

__all__ = ["build_writer", "start_writer", "stream_context"]


def stream_context(definition: StreamDefinition, spec: StreamSpec, work_dir: Path, purpose: str) -> StreamContext:
    """What the stream definition gets: the knobs, the source options they map to, the workload's options."""
    mapping = {**definition.knob_options, **spec.knob_options}
    source_options = {
        option: str(getattr(spec, knob)) for knob, option in mapping.items() if getattr(spec, knob) is not None
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    return StreamContext(
        name=spec.name,
        code_version=spec.code_version,
        options=definition.parse_options(spec.options),
        state_partitions=spec.state_partitions,
        source_partitions=spec.source_partitions,
        max_per_trigger=spec.max_per_trigger,
        trigger_interval_s=spec.trigger_interval_s,
        source_options=source_options,
        work_dir=work_dir,
        purpose=purpose,
    )


def build_writer(definition: StreamDefinition, spark: SparkSession, context: StreamContext) -> DataStreamWriter:
    """The user's query, as the definition returns it (checkpoint, name and trigger not set yet).

    Raises:
        StreamStartError: the definition raised, or returned something else than a writer.
    """
    try:
        result = definition(spark, context)
    except (SpecError, StreamStartError):
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise StreamStartError(
            f"stream definition {definition.name} raised {type(exc).__name__}: {first}{_missing_connector_hint(first)}"
        ) from exc
    if isinstance(result, StreamOutput):
        result = result.writer()
    if not isinstance(result, DataStreamWriter):
        raise StreamStartError(
            f"stream definition {definition.name} returned {type(result).__name__}; it must return a "
            "DataStreamWriter (df.writeStream...., without .start()) or a StreamOutput(frame, format=..., ...)"
        )
    return result


def start_writer(
    writer: DataStreamWriter, spec: StreamSpec, checkpoint: Path | Any, *, purpose: str, once: bool, what: str
) -> StreamingQuery:
    """Start ``writer`` as ``spec``'s query into ``checkpoint``: under the stream's name for ``purpose`` ``stream``;
    under ``<name>__<purpose>`` into the noop sink otherwise (a replay, a probe), so those batches never count as the
    stream's. ``once``: one trigger, then stop.

    Raises:
        StreamStartError: Spark refused to start it (``what``: the definition, named in the message).
    """
    name = spec.name if purpose == "stream" else f"{spec.name}__{purpose}"
    writer = writer.queryName(name).option("checkpointLocation", spark_uri(checkpoint))
    if purpose != "stream":
        writer = writer.format("noop")
    if once:
        writer = writer.trigger(once=True)
    elif spec.trigger_interval_s > 0:
        writer = writer.trigger(processingTime=f"{round(spec.trigger_interval_s * 1000)} milliseconds")
    else:
        writer = writer.trigger(processingTime="0 seconds")
    try:
        return writer.start()
    except Exception as exc:
        raise StreamStartError(
            f"stream {spec.name!r} ({what}) could not start: {type(exc).__name__}: {first_line(exc)}"
        ) from exc


def _missing_connector_hint(message: str) -> str:
    """The fix for a source or sink whose connector is not on the classpath (Kafka's above all: pyspark lacks it)."""
    if "KAFKA_DATA_SOURCE_NOT_ENABLED" in message or "Failed to find data source: kafka" in message:
        return (
            "; put Spark's Kafka connector on the driver's classpath through the spec's spark_conf: "
            "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<your Spark version> (or spark.jars "
            "naming its jar files)"
        )
    return ""
