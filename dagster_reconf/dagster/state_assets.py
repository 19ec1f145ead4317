"""``stream_state``: a stream's state by partition, read in a Dagster run with dagster-pyspark's session.

Per operator and store, the rows and bytes in each state partition at the last committed batch, and the hottest
partition against the median (:mod:`dagster_reconf.core.spark.state_skew`), so a hot key range shows in Dagster
without traces. The read is a batch job over the checkpoint (``file://``, ``s3a://``: whatever the session's Hadoop
settings reach); it never touches the running stream. The run's SparkSession comes from a ``pyspark`` resource
(:class:`dagster_pyspark.PySparkResource`): give it the settings that reach the checkpoint (an S3 endpoint and
credentials, the state store provider) as ``spark_config``.
"""

from collections.abc import Sequence

import dagster as dg
import pandas as pd
from dagster_pyspark import PySparkResource

from dagster_reconf.dagster.metadata_tables import frame_table, round_figure
from dagster_reconf.dagster.resources import StreamRuntimeResource
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator, asset_arguments

__all__ = ["HOTTEST_SHOWN", "STATE_READER_CONF", "build_stream_state_asset"]

HOTTEST_SHOWN = 20  # partitions listed by rows, hottest first; the summary covers all of them
# The run's batch session: one core is enough to count a checkpoint's state, no UI to bind, and the state store
# provider the managed streams write with (Spark reads a store with the provider it is given).
STATE_READER_CONF = {
    "spark.master": "local[1]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
}


def build_stream_state_asset(
    *,
    streams: Sequence[str] | None = None,
    group_name: str | None = None,
    translator: ReconfTranslator | None = None,
) -> dg.AssetsDefinition:
    """The ``stream_state`` asset, partitioned by stream like the others (``streams`` None: dynamic partitions).

    It needs the resources ``streams`` (:class:`StreamRuntimeResource`) and ``pyspark``
    (:class:`dagster_pyspark.PySparkResource`).
    """
    translator = translator or ReconfTranslator()
    partitions = translator.stream_partitions(streams)
    spec = translator.get_asset_spec(AssetKind.STREAM_STATE)

    @dg.asset(
        **asset_arguments(
            spec,
            group_name=group_name,
            partitions_def=partitions,
            deps=[translator.asset_key(AssetKind.STREAM)],
        )
    )
    def stream_state(
        context: dg.AssetExecutionContext, streams: StreamRuntimeResource, pyspark: PySparkResource
    ) -> dg.MaterializeResult:
        from dagster_reconf.core.spark.state_skew import state_skew

        stream = context.partition_key
        if streams.attached(stream):
            return dg.MaterializeResult(
                metadata={"note": "attached: its checkpoint belongs to its own application, not read here"}
            )
        checkpoint = streams.checkpoint(stream)
        skew = state_skew(pyspark.spark_session, checkpoint)
        context.log.info(f"{stream}: {len(skew.stores)} state stores at batch {skew.batch_id} of {checkpoint}")
        metadata: dict[str, object] = {"checkpoint": dg.MetadataValue.path(str(checkpoint))}
        if skew.batch_id is None:
            return dg.MaterializeResult(metadata={**metadata, "note": "no committed batch yet: no state to read"})
        metadata["batch_id"] = skew.batch_id
        if not skew.stores:
            return dg.MaterializeResult(metadata={**metadata, "note": "the query keeps no state"})
        summary = pd.DataFrame(
            [
                {
                    "operator": f"{s.operator_id} {s.operator}",
                    "store": s.store,
                    "partitions": s.partitions,
                    "with_rows": s.partitions_with_rows,
                    "rows": s.rows,
                    "rows_median": s.rows_median,
                    "rows_max": s.rows_max,
                    "hottest_partition": s.hottest_partition,
                    "skew": s.skew,
                    "json_bytes": s.json_bytes,
                    "json_bytes_max": s.json_bytes_max,
                }
                for s in skew.stores
            ]
        )
        hottest = max(skew.stores, key=lambda s: s.skew)
        hot = skew.by_partition.sort_values(["rows", "json_bytes"], ascending=False).head(HOTTEST_SHOWN)
        metadata.update(
            {
                "state_rows": int(summary["rows"].sum()),
                "max_skew": round_figure(float(hottest.skew)),
                "hottest": f"partition {hottest.hottest_partition} of {hottest.operator_id}/{hottest.store}: "
                f"{hottest.rows_max:,} rows against a median of {hottest.rows_median:,.0f}",
                "stores": frame_table(
                    summary,
                    {
                        "skew": "rows of the hottest partition over the median partition's",
                        "json_bytes": "keys and values as JSON, in bytes (to compare partitions; not the size on disk)",
                    },
                ),
                "hottest_partitions": frame_table(hot),
            }
        )
        return dg.MaterializeResult(metadata=metadata)

    return stream_state
