"""A precopy's catch-up rounds: another round while the copy gains or holds its ground, a fresh copy or a stop
where it falls behind, none once close enough; the last one after the batch in flight commits."""

import threading
import time

import pytest

from dagster_reconf.core.reconfig.pause_point import await_batch_boundary, batch_in_flight_may_commit
from dagster_reconf.core.spark.batch_replay import next_precopy_round

from .test_precopy_copy import make_checkpoint


@pytest.mark.parametrize(
    ("behind", "last_delta", "per_batch_s", "copy_s", "recopied", "close_enough", "step"),
    [
        (0, None, 0.0, 5.0, False, 0, "stop"),  # caught up
        (2, None, 0.0, 5.0, False, 2, "stop"),  # close enough for the pause
        (3, None, 0.0, 5.0, False, 2, "replay"),  # the first round
        (1, 1, 2.2, 5.0, False, 0, "replay"),  # one batch committed while one was replayed: no loss, again
        (1, 3, 2.0, 5.0, False, 0, "replay"),  # gaining
        (4, 2, 2.0, 5.0, False, 0, "recopy"),  # falling behind, and 4 replays (8 s) cost more than a copy (5 s)
        (4, 2, 1.0, 5.0, False, 0, "stop"),  # falling behind, but replaying the 4 is cheaper than a copy
        (4, 2, 2.0, 5.0, True, 0, "stop"),  # falling behind again after the one fresh copy
    ],
)
def test_the_next_round(behind, last_delta, per_batch_s, copy_s, recopied, close_enough, step):
    assert next_precopy_round(behind, last_delta, per_batch_s, copy_s, recopied, close_enough) == step


def test_merged_rounds_never_copy_again():
    """A merged round costs about a query start whatever it replays: falling behind stops the rounds, holding its
    ground goes on."""
    assert next_precopy_round(4, 2, 2.0, 5.0, False, 0, merged=True) == "stop"
    assert next_precopy_round(2, 2, 0.6, 5.0, False, 0, merged=True) == "replay"


def test_the_last_round_waits_for_the_batch_in_flight_to_commit(tmp_path):
    """A batch in flight after the copy's rounds would be replayed in the pause: the precopy waits for its commit
    (then catches it up while the stream runs), at most 1.5 batches, and not at all between batches."""
    make_checkpoint(tmp_path / "cp", last_offset=6, last_commit=5)  # batch 6 planned, not committed
    commit = threading.Timer(0.3, lambda: (tmp_path / "cp" / "commits" / "6").write_text("v1\n{}"))
    commit.start()
    waited = await_batch_boundary(tmp_path / "cp", batch_s=4.0)
    commit.join()
    assert 0.25 <= waited < 2.0
    assert await_batch_boundary(tmp_path / "cp", batch_s=4.0) < 0.05  # between batches: no wait

    make_checkpoint(tmp_path / "stuck", last_offset=6, last_commit=5)
    started = time.monotonic()
    waited = await_batch_boundary(tmp_path / "stuck", batch_s=0.4)
    assert 1.0 <= waited < 3.0 and time.monotonic() - started < 3.0  # bounded: 1.5 batches, at least 1 s


@pytest.mark.parametrize(
    ("strategy", "needs_migration", "precopy", "waits"),
    [
        ("native", True, None, True),  # the repartition takes whatever batch the checkpoint ends at
        ("precopy", True, {"merge": True, "rounds": [3, 1]}, True),  # the pause replays its batches as one
        ("precopy", True, {"failed": "no copy"}, True),  # falls back to native
        ("precopy", True, {"merge": False, "rounds": [1]}, False),  # each committed batch: a query start in the pause
        ("replay", True, None, False),  # the same
        ("native", False, None, False),  # nothing migrates: an interrupted batch stays planned for the new settings
    ],
)
def test_a_pause_lets_the_batch_in_flight_commit_where_that_costs_it_only_the_batch_s_data(
    strategy, needs_migration, precopy, waits
):
    assert batch_in_flight_may_commit(strategy, needs_migration, precopy) is waits
