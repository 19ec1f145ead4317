import pandas as pd

from dagster_reconf.workloads.oracle import compare, stream_result
from dagster_reconf.workloads.queries import get_query


def test_identical_multisets_match_in_any_order():
    a = pd.DataFrame({"k": [1, 2, 2], "v": ["x", "y", "y"]})
    assert compare(a.iloc[::-1], a).ok


def test_duplicate_and_lost_rows_are_counted():
    expected = pd.DataFrame({"k": [1, 2, 3]})
    actual = pd.DataFrame({"k": [1, 1, 2]})
    result = compare(actual, expected)
    assert (result.lost, result.duplicated) == (1, 1)


def test_timestamps_compare_across_timezone_representations():
    naive = pd.DataFrame({"t": pd.to_datetime(["2026-01-01 00:00:01"])})
    aware = pd.DataFrame({"t": pd.to_datetime(["2026-01-01 00:00:01"]).tz_localize("UTC")})
    assert compare(naive, aware).ok


def test_update_query_result_is_last_value_per_key():
    committed = pd.DataFrame({"word": ["a", "b", "a"], "count": [1, 1, 3], "batch_id": [0, 0, 1]})
    result = stream_result(committed, get_query("wordcount"))
    assert sorted(map(tuple, result.values.tolist())) == [("a", 3), ("b", 1)]


def test_append_aggregation_keeps_rows_closed_by_watermark():
    committed = pd.DataFrame(
        {
            "bidder": [1, 2],
            "session_start": pd.to_datetime(["2026-01-01 00:00:00", "2026-01-01 00:00:05"]),
            "session_end": pd.to_datetime(["2026-01-01 00:00:10", "2026-01-01 00:00:30"]),
            "bids": [3, 4],
            "batch_id": [1, 2],
        }
    )
    result = stream_result(committed, get_query("q11"), watermark="2026-01-01T00:00:12.000Z")
    assert result["bidder"].tolist() == [1]
