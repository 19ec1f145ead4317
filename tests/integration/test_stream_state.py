"""``stream_state`` in a Dagster run: the running stream's state by partition, read in batch through dagster-pyspark's
session, agrees with the state reader a migration verifies with."""

import pytest
from dagster import instance_for_test, materialize
from dagster_pyspark import PySparkResource
from pyspark.sql import SparkSession

from dagster_reconf import StreamRuntimeResource, build_stream_state_asset
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.spark.state_reader import state_summary
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import wait_until

pytestmark = pytest.mark.spark

STREAM = "counts"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def test_the_state_by_partition_matches_the_verifiers_count_and_names_the_hottest(tmp_path):
    supervisor = StreamSupervisor(tmp_path / "home")
    spec = bundled_spec(STREAM, "wordcount", rate=400, source_partitions=1, state_partitions=3, vocabulary=500)
    supervisor.start(spec)
    try:
        checkpoint = supervisor.paths(STREAM).checkpoint
        wait_until(lambda: (checkpoint_facts(checkpoint).last_committed_batch or -1) >= 2, what="three batches")
        session = {"spark.master": "local[1]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"}
        session["spark.sql.streaming.stateStore.providerClass"] = ROCKSDB  # the stream's own provider
        pyspark = PySparkResource(spark_config=session)
        resources = {"streams": StreamRuntimeResource(home=str(supervisor.home)), "pyspark": pyspark}
        with instance_for_test() as instance:
            result = materialize(
                [build_stream_state_asset(streams=[STREAM])],
                partition_key=STREAM,
                instance=instance,
                resources=resources,
            )
            assert result.success
            (materialization,) = result.asset_materializations_for_node("stream_state")
            metadata = materialization.metadata
            batch = metadata["batch_id"].value
            spark = SparkSession.builder.getOrCreate()  # the run's session, still up in this process
            expected = state_summary(spark, checkpoint, batch)  # what a verification counts
        assert metadata["state_rows"].value == expected.rows > 0
        stores = [row.data for row in metadata["stores"].records]
        assert {row["store"] for row in stores} == {s.store for s in expected.stores}
        assert all(row["partitions"] == 3 and row["rows_max"] >= row["rows_median"] for row in stores)
        hottest = [row.data for row in metadata["hottest_partitions"].records]
        assert hottest[0]["rows"] == max(row["rows_max"] for row in stores)
        assert [row["rows"] for row in hottest] == sorted((row["rows"] for row in hottest), reverse=True)
        assert metadata["max_skew"].value >= 1.0 and "partition " in metadata["hottest"].value
    finally:
        supervisor.stop(STREAM, timeout_s=60)
