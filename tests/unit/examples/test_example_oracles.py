"""The oracles of the example streams, on outputs built by hand: a clean output, and each way one can go wrong."""

import pandas as pd

from examples.customer_totals.streams import totals_check
from examples.rate_windows.streams import window_check


def windows(*rows: tuple[int, int, int, int]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["window_start", "events", "first", "last"])


def test_rate_windows_that_tile_the_values_pass():
    check = window_check(windows((0, 10, 0, 9), (10, 5, 10, 14), (20, 3, 15, 17)))
    assert (check.expected_rows, check.actual_rows, check.lost, check.duplicated) == (18, 18, 0, 0)


def test_rate_windows_count_the_missing_and_the_twice_counted_values():
    assert window_check(windows((0, 10, 0, 9), (10, 5, 12, 16))).lost == 2  # 10 and 11 fall between the windows
    assert window_check(windows((0, 10, 0, 11))).lost == 2  # inside a window
    assert window_check(windows((0, 10, 0, 9), (10, 5, 8, 12))).duplicated == 2  # the windows overlap
    assert window_check(windows((0, 12, 0, 9))).duplicated == 2  # counted twice inside a window
    twice = window_check(windows((0, 10, 0, 9), (0, 10, 0, 9), (10, 5, 10, 14)))
    assert (twice.expected_rows, twice.actual_rows, twice.lost, twice.duplicated) == (15, 25, 0, 10)  # written twice
    assert window_check(windows((0, 5, 3, 7))).lost == 3  # the values start at 0


def test_customer_totals_against_the_batch_count():
    expected = pd.DataFrame({"customer": [1, 2, 3], "count": [5, 4, 2]})
    clean = pd.DataFrame({"customer": [1, 2, 3], "last_total": [5, 4, 2], "summed": [5, 4, 2]})
    assert totals_check(expected, clean).ok
    replayed = clean.assign(summed=[5, 6, 2])  # a batch of customer 2 written twice
    assert (totals_check(expected, replayed).lost, totals_check(expected, replayed).duplicated) == (0, 2)
    restarted = clean.assign(last_total=[5, 1, 2])  # customer 2's state lost in a migration
    assert totals_check(expected, restarted).lost == 3
    missing = clean[clean["customer"] != 3]  # a customer never written
    assert totals_check(expected, missing).lost == 2
