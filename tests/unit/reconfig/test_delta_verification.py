"""The pause's check of a precopy: batches replayed into the copy changed its state as the live batches did; and
when the copy is verified ahead of the pause instead of in it."""

import pytest

from dagster_reconf.core.reconfig.precopy import replay_falls_behind, replay_keeps_pace
from dagster_reconf.core.reconfig.step_results import RecentPace
from dagster_reconf.core.reconfig.verification import delta_problems


def counts(total: int, updated: int, removed: int = 0) -> list[dict[str, int]]:
    return [{"numRowsTotal": total, "numRowsUpdated": updated, "numRowsRemoved": removed}]


def replay(copy_batch: int, total: int, updated: int, removed: int = 0) -> dict:
    return {"batch_id": copy_batch, "seconds": 1.0, "batch_s": 0.5, "state": counts(total, updated, removed)}


def test_replays_that_left_the_live_counts_pass():
    live = {7: counts(100, 10), 8: counts(104, 12, 1)}
    assert delta_problems(live, [replay(8, 100, 10), replay(9, 104, 12, 1)], shift=1) == []
    assert delta_problems(live, [], shift=1) == []  # nothing replayed: the copy was verified where the pause found it


def test_a_replay_that_changed_other_rows_is_named_with_both_batches():
    live = {7: counts(100, 10), 8: counts(104, 12)}
    problems = delta_problems(live, [replay(8, 100, 10), replay(9, 103, 11)], shift=1)
    assert len(problems) == 1 and "live batch 8" in problems[0] and "(batch 9)" in problems[0]
    assert "numRowsTotal': 103" in problems[0]


def test_an_unknown_live_batch_says_it_cannot_tell():
    assert delta_problems({7: counts(100, 10)}, [replay(8, 100, 10), replay(9, 104, 12)], shift=1) is None


def test_a_precopy_is_verified_ahead_only_where_its_replay_outruns_the_stream():
    one_second = RecentPace(0.0, batch_s=0.8, seconds_per_batch=1.0)
    five_seconds = RecentPace(0.0, batch_s=0.8, seconds_per_batch=5.0)
    # merged rounds cost a query start each, whatever they replay: holding their ground is keeping pace
    assert replay_keeps_pace({"merge": True, "rounds": [], "batches_left": 3}, one_second)
    assert replay_keeps_pace({"merge": True, "rounds": [6, 2], "batches_left": 2}, one_second)
    assert not replay_keeps_pace({"merge": True, "rounds": [2, 3], "batches_left": 4}, one_second)
    assert replay_keeps_pace({"rounds": [4], "batches_left": 2}, one_second)  # the round shrank the delta
    assert not replay_keeps_pace({"rounds": [3], "batches_left": 6}, five_seconds)  # it grew: measured beats guessed
    assert not replay_keeps_pace({"rounds": [], "batches_left": 2}, one_second)  # a query start alone outlasts a batch
    assert replay_keeps_pace({"rounds": [], "batches_left": 1}, five_seconds)
    assert not replay_keeps_pace(
        {"rounds": [], "batches_left": 1}, RecentPace(0.0, batch_s=None, seconds_per_batch=None)
    )


def test_a_precopy_is_not_even_copied_where_no_replay_can_keep_up():
    reason = replay_falls_behind(RecentPace(0.0, batch_s=0.8, seconds_per_batch=1.0))
    assert "about 2.3 s" in reason and "one every 1.0 s" in reason and "native migration runs in the pause" in reason
    assert replay_falls_behind(RecentPace(0.0, batch_s=0.8, seconds_per_batch=5.0)) is None
    assert (
        replay_falls_behind(RecentPace(0.0, batch_s=None, seconds_per_batch=None)) is None
    )  # unknown: the rounds will tell


def test_a_precopy_is_judged_on_the_batches_of_the_configuration_in_force():
    from dagster_reconf.core.progress.lifecycle import Restarted
    from dagster_reconf.core.reconfig.observe import recent_backlog
    from dagster_reconf.core.reconfig.precopy import precopy_verdict

    def batch(n: int, started: float) -> dict:
        stamp = f"2026-11-29T00:{int(started) // 60:02d}:{started % 60:06.3f}Z"
        progress = {"batchId": n, "timestamp": stamp, "durationMs": {"triggerExecution": 800}, "sources": []}
        return {"kind": "progress", "stream": "s", "recorded_at": started, "progress": progress}

    # a 2 s trigger, then a restart with 5 s: the old batches' pace is not the new one's
    records = [batch(n, 2.0 * n) for n in range(8)]
    records.append(Restarted(stream="s", spec={}, scope="query", seconds=3.0).to_record())
    records += [batch(8 + n, 30.0 + 5.0 * n) for n in range(5)]
    pace = recent_backlog(records, 5.0)
    assert pace.seconds_per_batch == 5.0 and pace.batch_s == pytest.approx(0.8)
    joins = "stateful operator 0 (symmetricHashJoin): whether a row was matched depends on the batch"
    verdict = precopy_verdict(pace, joins)
    assert verdict["runs"] and "one every 5.0 s" in verdict["why"] and not verdict["merged"]
    fell = precopy_verdict(recent_backlog(records[:8], 2.0), joins)
    assert not fell["runs"] and "one every 2.0 s" in fell["why"]  # 0.8 + 1.5 s per replayed batch
    assert f"(batches replay one by one: {joins})" in fell["why"]
    assert precopy_verdict(recent_backlog(records[:9], 5.0), joins) == {
        "runs": True,
        "merged": False,
        "why": "the pace of this configuration is not known yet: its rounds will tell",
    }
    # Where batches merge, a round pays one query start whatever it replays: it runs on the 2 s trigger too.
    merged = precopy_verdict(recent_backlog(records[:8], 2.0), None)
    assert merged["runs"] and merged["merged"] and "as one batch (one query start, then their data)" in merged["why"]


def test_merged_replays_end_with_the_last_batch_rows_and_drop_what_all_of_them_dropped():
    def live_counts(total: int, dropped: int) -> list[dict[str, int]]:
        return [{"numRowsTotal": total, "numRowsUpdated": 3, "numRowsRemoved": 1, "numRowsDroppedByWatermark": dropped}]

    live = {7: live_counts(100, 0), 8: live_counts(104, 2), 9: live_counts(110, 1)}

    def merged(total: int, dropped: int) -> dict:
        state = [
            {"numRowsTotal": total, "numRowsUpdated": 9, "numRowsRemoved": 0, "numRowsDroppedByWatermark": dropped}
        ]
        return {"batch_id": 10, "merged": [7, 8, 9], "seconds": 1.0, "batch_s": 0.5, "state": state}

    assert delta_problems(live, [merged(110, 3)], shift=1) == []  # updated and removed differ by nature: not compared
    late = delta_problems(live, [merged(110, 5)], shift=1)  # the merged watermark dropped rows the live ones kept
    assert len(late) == 1 and "live batches 7-9" in late[0] and "(batch 10)" in late[0] and "Watermark': 5" in late[0]
    assert delta_problems(live, [merged(109, 3)], shift=1) != []
    assert delta_problems({8: live[8], 9: live[9]}, [merged(110, 3)], shift=1) is None  # batch 7 unknown
    rerun = {**merged(110, 3), "state": None}  # committed by an earlier attempt: its counts are not known
    assert delta_problems(live, [rerun], shift=1) is None
    old = {b: [{"numRowsTotal": 1, "numRowsUpdated": 1, "numRowsRemoved": 0}] for b in (7, 8, 9)}
    assert delta_problems(old, [merged(1, 0)], shift=1) is None  # records without dropped counts cannot tell


def test_a_merged_pause_is_checked_by_counts_only_after_a_merged_round_was_compared_in_full():
    from dagster_reconf.core.reconfig.step_results import MigrateResult
    from dagster_reconf.core.reconfig.verification import precopy_delta

    def record(batch: int, total: int) -> dict:
        state = [{"numRowsTotal": total, "numRowsUpdated": 1, "numRowsRemoved": 0, "numRowsDroppedByWatermark": 0}]
        progress = {"batchId": batch, "durationMs": {"addBatch": 5}, "stateOperators": state}
        return {"kind": "progress", "progress": progress}

    tail = [record(b, 100 + b) for b in range(10, 14)]
    pause_run = {
        "batch_id": 14,
        "merged": [11, 12, 13],
        "state": [{"numRowsTotal": 113, "numRowsDroppedByWatermark": 0}],
    }
    migrated = MigrateResult.from_record({"strategy": "precopy", "batch_id": 14, "replays": [pause_run]})
    verified = {"live_batch": 10, "stores": [], "merged_runs": 0}
    assert precopy_delta({"verified": verified, "replays": []}, migrated, 13, lambda: tail) is None
    checked = precopy_delta({"verified": {**verified, "merged_runs": 1}, "replays": []}, migrated, 13, lambda: tail)
    assert checked["ok"] and checked["delta_batches"] == 1
    # caught up at the pause: nothing left to check; a native fallback or a skipped re-run: the whole state
    caught_up = MigrateResult.from_record({"strategy": "precopy", "batch_id": 11})
    assert precopy_delta({"verified": {**verified, "live_batch": 10}}, caught_up, 10, lambda: [])["ok"]
    for other in ({"strategy": "native", "fell_back": "too far behind"}, {"strategy": "precopy", "skipped": True}):
        assert precopy_delta({"verified": verified}, MigrateResult.from_record(other), 10, lambda: []) is None
