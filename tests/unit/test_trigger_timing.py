"""When Spark's processing-time trigger begins the next batch: what the stop judges "early" or "late" in a batch by."""

import pytest

from dagster_reconf.core.runtime import next_trigger_at


@pytest.mark.parametrize(("last_start", "last_batch_s", "interval_s", "expected"), [
    (100.0, 1.0, 5.0, 105.0),  # the next multiple of the interval since the epoch
    (102.3, 1.0, 5.0, 105.0),  # a trigger that began late still keeps the grid
    (100.0, 7.0, 5.0, 107.0),  # overran the interval: the next one begins as it ends (back to back)
    (100.0, 0.4, 0.0, 100.4),  # no interval: always back to back
])
def test_next_trigger(last_start, last_batch_s, interval_s, expected):
    assert next_trigger_at(last_start, last_batch_s, interval_s) == pytest.approx(expected)
