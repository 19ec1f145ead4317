"""A precopy's catch-up rounds: another round while the copy gains or holds its ground, a fresh copy or a stop
where it falls behind, none once close enough."""

import pytest

from dagster_reconf.core.reconfig.migration import next_precopy_round


@pytest.mark.parametrize(("behind", "last_delta", "per_batch_s", "copy_s", "recopied", "close_enough", "step"), [
    (0, None, 0.0, 5.0, False, 0, "stop"),  # caught up
    (2, None, 0.0, 5.0, False, 2, "stop"),  # close enough for the pause
    (3, None, 0.0, 5.0, False, 2, "replay"),  # the first round
    (1, 1, 2.2, 5.0, False, 0, "replay"),  # one batch committed while one was replayed: no loss, again
    (1, 3, 2.0, 5.0, False, 0, "replay"),  # gaining
    (4, 2, 2.0, 5.0, False, 0, "recopy"),  # falling behind, and 4 replays (8 s) cost more than a copy (5 s)
    (4, 2, 1.0, 5.0, False, 0, "stop"),  # falling behind, but replaying the 4 is cheaper than a copy
    (4, 2, 2.0, 5.0, True, 0, "stop"),  # falling behind again after the one fresh copy
])
def test_the_next_round(behind, last_delta, per_batch_s, copy_s, recopied, close_enough, step):
    assert next_precopy_round(behind, last_delta, per_batch_s, copy_s, recopied, close_enough) == step
