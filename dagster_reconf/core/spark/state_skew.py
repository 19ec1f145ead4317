"""How a checkpoint's state spreads over its partitions: rows and bytes per partition, the hottest against the median.

A hot key range puts most of a store's rows in a few partitions, and those partitions' tasks then set every batch's
duration: more cores do not help, more (or other) state partitions might. This reads the state of every store at one
committed batch with Spark's state data source (in batch, from any session that reaches the checkpoint) and counts
per partition:

* ``rows``: the store's rows;
* ``json_bytes``: the bytes of its keys and values written as JSON, a size to compare partitions by (it is not the
  store's size on disk, which RocksDB compresses and keeps in versions).

Partitions without rows count as 0, so the median is over every partition the checkpoint records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING

import pandas as pd

from dagster_reconf.core.spark.state_reader import stateful_operators, store_reads
from dagster_reconf.core.store.checkpoint import checkpoint_facts, partitions_at
from dagster_reconf.core.store.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PARTITION_COLUMNS", "StateSkew", "StoreSkew", "state_skew"]

PARTITION_COLUMNS = ["operator_id", "operator", "store", "partition_id", "rows", "json_bytes"]


@dataclass(frozen=True)
class StoreSkew:
    """One store's spread: totals, the median and hottest partition, and their ratio."""

    operator_id: int
    operator: str
    store: str
    partitions: int  # the checkpoint's state partitions
    partitions_with_rows: int
    rows: int
    rows_median: float
    rows_max: int
    hottest_partition: int
    json_bytes: int
    json_bytes_max: int

    @property
    def skew(self) -> float:
        """The hottest partition's rows over the median partition's (a median of 0 counts as 1)."""
        return self.rows_max / max(self.rows_median, 1.0)


@dataclass(frozen=True)
class StateSkew:
    """Every store of a checkpoint at one batch, and the rows behind them (one per store and partition)."""

    checkpoint: str
    batch_id: int | None  # None: no committed batch, nothing read
    stores: list[StoreSkew] = field(default_factory=list)
    by_partition: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PARTITION_COLUMNS))


def state_skew(spark: SparkSession, checkpoint: Location, batch_id: int | None = None) -> StateSkew:
    """The spread of ``checkpoint``'s state at ``batch_id`` (default: its last committed batch), in one Spark job."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    if batch_id is None:
        batch_id = checkpoint_facts(checkpoint).last_committed_batch
    if batch_id is None:
        return StateSkew(str(checkpoint), None)
    parts = []
    for store in stateful_operators(spark, checkpoint):
        for label, frame in store_reads(spark, checkpoint, store, batch_id):
            content = [c for c in frame.columns if c != "partition_id"]
            parts.append(
                frame.groupBy("partition_id")
                .agg(
                    F.count(F.lit(1)).alias("rows"),
                    F.sum(F.octet_length(F.to_json(F.struct(*content)))).alias("json_bytes"),
                )
                .select(
                    F.lit(store["operator_id"]).alias("operator_id"),
                    F.lit(store["operator"]).alias("operator"),
                    F.lit(label).alias("store"),
                    "partition_id",
                    "rows",
                    "json_bytes",
                )
            )
    if not parts:
        return StateSkew(str(checkpoint), batch_id)
    counted = reduce(DataFrame.unionByName, parts).toPandas()
    partitions = partitions_at(checkpoint, batch_id) or int(counted["partition_id"].max()) + 1
    return StateSkew(str(checkpoint), batch_id, *_spread(counted, partitions))


def _spread(counted: pd.DataFrame, partitions: int) -> tuple[list[StoreSkew], pd.DataFrame]:
    """Per store: every partition (those without rows as 0) and its summary."""
    stores, frames = [], []
    for (operator_id, operator, store), rows in counted.groupby(["operator_id", "operator", "store"], sort=True):
        full = (
            rows.set_index("partition_id")[["rows", "json_bytes"]]
            .reindex(range(max(partitions, int(rows["partition_id"].max()) + 1)), fill_value=0)
            .astype("int64")
            .rename_axis("partition_id")
            .reset_index()
        )
        full.insert(0, "store", store)
        full.insert(0, "operator", operator)
        full.insert(0, "operator_id", int(operator_id))
        frames.append(full)
        hottest = int(full.loc[full["rows"].idxmax(), "partition_id"])
        stores.append(
            StoreSkew(
                operator_id=int(operator_id),
                operator=str(operator),
                store=str(store),
                partitions=len(full),
                partitions_with_rows=int((full["rows"] > 0).sum()),
                rows=int(full["rows"].sum()),
                rows_median=float(full["rows"].median()),
                rows_max=int(full["rows"].max()),
                hottest_partition=hottest,
                json_bytes=int(full["json_bytes"].sum()),
                json_bytes_max=int(full["json_bytes"].max()),
            )
        )
    return stores, pd.concat(frames, ignore_index=True)[PARTITION_COLUMNS]
