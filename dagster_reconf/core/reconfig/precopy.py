"""Precopy: a repartitioned copy of the state, prepared and caught up while the stream runs (VM live migration's
iterative pre-copy, on a checkpoint), so the pause replays only the batches committed since.

The copy pays only where a replayed batch is quicker than the stream's time per batch: then each catch-up round leaves
fewer batches behind, and the copy is verified before the pause. Otherwise nothing is copied, or the copy is left
unverified, and the pause runs the native migration or compares the whole state, and the record says why.

Where the stream's operators and state files allow (:func:`batch_merge_problem`), each round replays the batches
committed since the last one as one query batch: a query start per round, not per batch, so the copy catches up on
short triggers too. Otherwise a round pays a query start per batch, and a copy that cannot catch up is not made.

``history`` below is the stream's recent pace (:class:`~dagster_reconf.core.reconfig.step_results.RecentPace`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.reconfig.operators import merge_problems
from dagster_reconf.core.reconfig.pause_point import await_batch_boundary
from dagster_reconf.core.reconfig.step_results import RecentPace
from dagster_reconf.core.reconfig.verification import verify_migration
from dagster_reconf.core.spark.state_reader import StateSummary
from dagster_reconf.core.store.checkpoint import operator_metadata, retained_batches
from dagster_reconf.core.store.state_versions import state_versions_problem
from dagster_reconf.core.store.storage import Location

if TYPE_CHECKING:
    from dagster_reconf.core.reconfig.handles import StreamHandle

__all__ = [
    "QUERY_START_ALLOWANCE_S",
    "batch_merge_problem",
    "precopy_verdict",
    "prepare_precopy",
    "replay_falls_behind",
    "replay_keeps_pace",
    "replay_pace",
    "verify_copy",
]

QUERY_START_ALLOWANCE_S = 1.5  # what a replayed batch adds to a live one: its query's start


def batch_merge_problem(checkpoint: Location) -> str | None:
    """Why a precopy of ``checkpoint`` cannot replay several batches as one (None: it can)."""
    problems = merge_problems(operator_metadata(checkpoint))
    if problems:
        return "; ".join(problems)
    return state_versions_problem(checkpoint)


def replay_pace(history: RecentPace) -> tuple[float | None, float]:
    """What a replayed batch is expected to take, and the stream's seconds per batch (None, inf: unknown)."""
    batch_s, per_batch_s = history.batch_s, history.seconds_per_batch
    if batch_s is None or per_batch_s is None:
        return None, float("inf")
    return batch_s + QUERY_START_ALLOWANCE_S, per_batch_s


def replay_keeps_pace(prepared: dict[str, Any], history: RecentPace) -> bool:
    """Whether a precopy's catch-up outruns the live stream: its last round left fewer batches behind than it
    replayed; without a round, a live batch plus :data:`QUERY_START_ALLOWANCE_S` takes less than the stream's time
    per batch.

    Only then is its copy verified before the pause: the verification's full read of the state lets the stream run
    ahead meanwhile, and rounds that cannot catch up would leave all of that to the pause.
    """
    rounds = prepared.get("rounds") or []
    if prepared.get("merge"):  # a round is mostly its query start: holding its ground is keeping pace
        return not rounds or prepared["batches_left"] <= rounds[-1]
    if rounds:
        return prepared["batches_left"] < rounds[-1]
    replay_s, per_batch_s = replay_pace(history)
    return replay_s is not None and replay_s < per_batch_s


def replay_falls_behind(history: RecentPace) -> str | None:
    """Why a precopy would only lengthen the pause (None: it may pay): a replayed batch takes at least as long as
    the stream takes per batch, so no round can catch up and the pause would replay more batches than the native
    migration costs. Unknown pace: None (the rounds will tell)."""
    replay_s, per_batch_s = replay_pace(history)
    if replay_s is None or replay_s < per_batch_s:
        return None
    return (
        f"a replayed batch takes about {replay_s:.1f} s (a live batch of {history.batch_s:.1f} s plus "
        f"{QUERY_START_ALLOWANCE_S:g} s to start its query) and the stream commits one every {per_batch_s:.1f} s: "
        "the copy could not catch up, so the native migration runs in the pause; precopy pays on longer triggers"
    )


def precopy_verdict(history: RecentPace, unmergeable: str | None) -> dict[str, Any]:
    """Whether a precopy will run or fall back to the native migration, and why, from the pace of the configuration in
    force (what preflight says before anything is touched). ``unmergeable``: :func:`batch_merge_problem`'s answer."""
    if unmergeable is None:
        return {
            "runs": True,
            "merged": True,
            "why": "each catch-up round replays the batches committed since the last one as one batch (one query "
            "start, then their data), so the copy catches up at this trigger; a copy the rounds leave too far "
            "behind at the pause falls back to the native migration",
        }
    falls_behind = replay_falls_behind(history)
    if falls_behind:
        return {"runs": False, "merged": False, "why": f"{falls_behind} (batches replay one by one: {unmergeable})"}
    replay_s, per_batch_s = replay_pace(history)
    if replay_s is None:
        return {
            "runs": True,
            "merged": False,
            "why": "the pace of this configuration is not known yet: its rounds will tell",
        }
    return {
        "runs": True,
        "merged": False,
        "why": f"a replayed batch takes about {replay_s:.1f} s and the stream commits one every {per_batch_s:.1f} s: "
        "the copy catches up while the stream runs",
    }


def verify_copy(stream: StreamHandle, prepared: dict[str, Any], partitions: int) -> dict[str, Any]:
    """The prepared copy against the live state at the batch it reached, while the stream runs (both committed:
    their files no longer change); in the pause only the batches replayed since are checked.

    Raises:
        StreamStateError: they differ (the copy is not used; the migration runs the native way).
    """
    started = time.monotonic()
    batch, generation = prepared["caught_up_to"], prepared["generation"]
    live, copy = map(StateSummary.from_dict, stream.states([(generation - 1, batch), (generation, batch + 1)]))
    verification = verify_migration(live, copy, partitions)
    logged = retained_batches(stream.paths.checkpoint_of(generation), batch + 1)
    merged_runs = sum(b - a > 1 for a, b in zip(logged, logged[1:]) if a > prepared["from_batch"])  # gaps: merges
    if not verification.ok:
        raise StreamStateError(
            f"the prepared copy differs from the live state at batch {batch}: "
            + "; ".join(verification.problems or verification.gx.failures)
        )
    return {
        **verification.as_dict(),
        "live_batch": batch,
        "merged_runs": merged_runs,  # merged replays this copy went through, compared in full: merging is exact here
        "seconds": round(time.monotonic() - started, 3),
    }


def prepare_precopy(stream: StreamHandle, partitions: int, history: RecentPace) -> dict[str, Any]:
    """Prepare the copy; where its catch-up outruns the stream, verify it now and catch it up completely.

    Raises:
        StreamStateError: a precopy cannot pay at this pace, or its copy differs (the pause runs the native way).
    """
    unmergeable = batch_merge_problem(stream.paths.checkpoint)
    merge = unmergeable is None
    falls_behind = None if merge else replay_falls_behind(history)
    if falls_behind:  # nothing copied: the pause runs the native migration and the record says why
        raise StreamStateError(f"{falls_behind} (batches replay one by one: {unmergeable})")
    started = time.monotonic()
    first = stream.precopy(partitions, merge=merge)
    if not replay_keeps_pace(first, history):  # a verification now would leave the pause more to replay than it saves
        return {**first, "unmergeable": unmergeable, "verified": None}
    verified = verify_copy(stream, first, partitions)
    prepared, rounds, waited_s = first, list(first["rounds"]), 0.0
    for _ in range(2):
        later = stream.precopy(partitions, close_enough=0, merge=merge)  # what committed while it was verified
        rounds += later["rounds"]
        if later["from_batch"] != prepared["from_batch"]:  # made again from a newer batch: verify that one
            verified = verify_copy(stream, later, partitions)
        prepared = later
        if verified["merged_runs"] or not any(len(run.get("merged") or []) > 1 for run in later["replays"]):
            break
        # The pause checks a merged run by its counts only once one was compared with the whole state: do so now.
        verified = verify_copy(stream, later, partitions)
    replay_s, per_batch_s = replay_pace(history)
    if prepared["batches_left"] == 0 and replay_s is not None and replay_s < per_batch_s:
        # Caught up, and a replayed batch fits the stream's time per batch: one more round, for the batch in flight
        # (which the pause would otherwise replay: a query start plus the batch).
        waited_s = await_batch_boundary(stream.paths.checkpoint, history.batch_s)
        last = stream.precopy(partitions, close_enough=0, merge=merge)
        replays = prepared["replays"] + last["replays"]  # the pause checks those after the verified batch
        if last["from_batch"] != prepared["from_batch"]:
            verified, replays = verify_copy(stream, last, partitions), last["replays"]
        prepared, rounds = {**last, "replays": replays}, rounds + last["rounds"]
    return {
        **prepared,
        "unmergeable": unmergeable,
        "verified": verified,
        "rounds": rounds,
        "boundary_wait_s": waited_s,
        "seconds": round(time.monotonic() - started, 3),
    }
