"""Attached streams without Spark: the trigger interval inferred from batch starts, and the attach spec's checks."""

import numpy as np
import pytest

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.traces.attach import AttachSpec, infer_trigger_interval_s


def test_the_trigger_is_where_batches_that_waited_started():
    # Measured from a Spark 4.3 event log (1 s trigger): batch 3 overran, 4 and 5 ran back to back, 6 realigned.
    starts = np.array([21021, 22001, 23000, 24574, 25733, 26288, 27000])
    durations = np.array([800, 563, 673, 1155, 550, 549, 565])
    assert infer_trigger_interval_s(starts, durations) == 1.0
    assert infer_trigger_interval_s(np.arange(10) * 2000 + 5, np.full(10, 300)) == 2.0
    assert infer_trigger_interval_s(np.arange(10) * 500 + 3, np.full(10, 100)) == 0.5


def test_back_to_back_batches_tell_no_trigger():
    assert infer_trigger_interval_s(np.cumsum(np.full(10, 700)), np.full(10, 700)) is None


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"event_logs": "logs/relative"}, r"event_logs: storage 'logs/relative' is not a URL"),
        ({"event_logs": "nosuch://x"}, r"not a filesystem fsspec knows"),
        ({"name": "Bad Name"}, r"name: String should match pattern"),
        ({"trigger_interval_s": -1}, r"trigger_interval_s: Input should be greater than or equal to 0"),
    ],
)
def test_bad_attach_specs_name_the_field(fields, match):
    with pytest.raises(SpecError, match=match):
        AttachSpec.parse({"name": "s", "event_logs": "/var/log/spark", **fields})


def test_local_paths_and_urls_are_locations():
    assert AttachSpec.parse({"name": "s", "event_logs": "/var/log/spark/"}).event_logs == "/var/log/spark"
    assert AttachSpec.parse({"name": "s", "event_logs": "s3://bucket/events"}).event_logs == "s3://bucket/events"
