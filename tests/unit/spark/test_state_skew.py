"""The spread of a store's state over its partitions, from counted rows (no Spark)."""

import pandas as pd

from dagster_reconf.core.spark.state_skew import PARTITION_COLUMNS, _spread


def test_a_hot_partition_shows_against_the_median_and_empty_partitions_count_as_zero():
    counted = pd.DataFrame(
        [
            {
                "operator_id": 0,
                "operator": "stateStoreSave",
                "store": "default",
                "partition_id": p,
                "rows": r,
                "json_bytes": 10 * r,
            }
            for p, r in [(0, 5), (1, 6), (3, 90)]  # partition 2 holds nothing
        ]
        + [{"operator_id": 1, "operator": "dedupe", "store": "default", "partition_id": 0, "rows": 4, "json_bytes": 40}]
    )
    stores, by_partition = _spread(counted, partitions=4)
    hot, single = stores
    assert (hot.operator_id, hot.partitions, hot.partitions_with_rows, hot.rows) == (0, 4, 3, 101)
    assert hot.rows_median == 5.5 and hot.rows_max == 90 and hot.hottest_partition == 3
    assert round(hot.skew, 2) == round(90 / 5.5, 2) and hot.json_bytes == 1010 and hot.json_bytes_max == 900
    assert single.partitions == 4 and single.rows_median == 0.0 and single.skew == 4.0, "a median of 0 counts as 1"
    assert list(by_partition.columns) == PARTITION_COLUMNS and len(by_partition) == 8
    assert by_partition.query("operator_id == 0 and partition_id == 2")["rows"].item() == 0
