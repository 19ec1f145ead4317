"""Replaying a checkpoint's planned batches into another checkpoint: the engine of the replay and precopy strategies.

A batch's offset entry is copied into the new checkpoint and a once-trigger query runs exactly that batch, output
discarded, so the new checkpoint's state is what the old one's batches made of it, at the new state partitions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.progress.state_rows import state_row_counts
from dagster_reconf.core.spark.termination import await_termination
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import committed_batches, copy_offset_entry, copy_source_logs
from dagster_reconf.core.store.storage import Location

if TYPE_CHECKING:
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["BATCH_TIMEOUT_S", "next_precopy_round", "replay_batches"]

BATCH_TIMEOUT_S = 600.0


def replay_batches(
    runtime: StreamRuntime,
    old: Location,
    new: Location,
    batch_ids: list[int],
    spec: StreamSpec,
    purpose: str = "replay",
    shift: int = 0,
) -> list[dict[str, Any]]:
    """Run batches ``batch_ids`` of checkpoint ``old`` again, one by one with their logged offsets, into checkpoint
    ``new``.

    Each batch's offset entry is copied (with ``spec``'s state partitions) and a once-trigger
    query, output discarded, runs exactly that planned batch. Returns, per batch run, its id in
    ``new``, the seconds from the query's start to its end, the batch's own share of them
    (Spark's ``triggerExecution``), and its state operators' row counts (Spark's progress).

    Raises:
        StreamStateError: a batch failed or did not commit.
    """
    copy_source_logs(old, new)
    runs = []
    for source_batch in batch_ids:
        batch_id = source_batch + shift  # a precopy's batches run one id later than the live ones
        if batch_id in committed_batches(new):
            continue  # an earlier attempt got this far
        copy_offset_entry(old, new, source_batch, spec.state_partitions, as_batch=batch_id)
        started = time.monotonic()
        query = runtime.start_query(spec, checkpoint=new, purpose=purpose, once=True)
        try:
            if not await_termination(query, BATCH_TIMEOUT_S):
                raise StreamStateError(
                    f"{purpose} of batch {batch_id} into {new} did not finish in {BATCH_TIMEOUT_S:g} s"
                )
            if query.exception() is not None:
                raise StreamStateError(
                    f"{purpose} of batch {batch_id} into {new} failed: {str(query.exception()).strip().splitlines()[0]}"
                )
        finally:
            query.stop()
        if batch_id not in committed_batches(new):
            raise StreamStateError(f"{purpose} of batch {batch_id} into {new} ran but did not commit")
        progress = dict(query.lastProgress or {})
        runs.append(
            {
                "batch_id": batch_id,
                "seconds": round(time.monotonic() - started, 3),
                "batch_s": (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000,
                "state": state_row_counts(progress),
            }
        )
    return runs


def next_precopy_round(
    behind: int, last_delta: int | None, per_batch_s: float, copy_s: float, recopied: bool, close_enough: int
) -> Literal["replay", "recopy", "stop"]:
    """What a precopy does next, with its copy ``behind`` batches behind the live stream.

    Its last round replayed ``last_delta`` batches (None: no round on this copy yet) at
    ``per_batch_s`` each. Close enough: stop. A round that ended further behind than it began
    means the replay is slower than the stream: a fresh copy where it costs less than
    replaying the delta (once), otherwise stop (more rounds only lose). As far behind as it
    began (the stream committed as many batches as the round replayed) is no loss: another round.
    """
    if behind <= close_enough:
        return "stop"
    if last_delta is not None and behind > last_delta:
        return "stop" if recopied or behind * per_batch_s <= copy_s else "recopy"
    return "replay"
