"""``stream_progress``: the micro-batch history of each managed stream, one partition per stream.

Static partitions by stream name: the set of managed streams is part of this code
location's definition, and each stream's history is read whole from its metrics store.
"""

import dagster as dg
import pandas as pd

from dagster_reconf import StreamRuntimeResource
from resources.streams import STREAM_NAMES

stream_partitions = dg.StaticPartitionsDefinition(STREAM_NAMES)


def progress_metadata(frame: pd.DataFrame) -> dict[str, dg.MetadataValue]:
    """The figures a person checks first, plus the last batches as a table."""
    if frame.empty:
        return {"batches": dg.MetadataValue.int(0)}
    recent = frame[
        [
            "batch_id",
            "num_input_rows",
            "input_rows_per_second",
            "processed_rows_per_second",
            "batch_duration_ms",
            "backlog_events",
            "state_rows",
        ]
    ].tail(10)
    return {
        "batches": dg.MetadataValue.int(len(frame)),
        "last_batch_id": dg.MetadataValue.int(int(frame["batch_id"].iloc[-1])),
        "mean_input_rows_per_second": dg.MetadataValue.float(float(frame["input_rows_per_second"].mean())),
        "mean_processed_rows_per_second": dg.MetadataValue.float(float(frame["processed_rows_per_second"].mean())),
        "max_backlog_events": dg.MetadataValue.int(int(frame["backlog_events"].fillna(0).max())),
        "state_rows": dg.MetadataValue.int(int(frame["state_rows"].iloc[-1])),
        "recent_batches": dg.MetadataValue.md(recent.to_markdown(index=False)),
    }


@dg.asset(partitions_def=stream_partitions, group_name="streams", kinds={"spark", "pandas"})
def stream_progress(context: dg.AssetExecutionContext, streams: StreamRuntimeResource) -> dg.MaterializeResult:
    """Per-batch figures (rates, batch duration, backlog, state rows) of one managed stream."""
    frame, _ = streams.progress(context.partition_key)
    context.log.info(f"stream {context.partition_key}: {len(frame)} progress events")
    return dg.MaterializeResult(metadata=progress_metadata(frame))
