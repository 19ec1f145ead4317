"""Replaying a checkpoint's planned batches into another checkpoint: the engine of the replay and precopy strategies.

A batch's offset entry is copied into the new checkpoint and a once-trigger query runs exactly that batch, output
discarded, so the new checkpoint's state is what the old one's batches made of it, at the new state partitions. Spark
re-runs only the newest planned batch of an offset log, so that is a query start per batch; a precopy's catch-up runs
several batches as one instead (:func:`replay_merged`), where the operators allow.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.progress.state_rows import state_row_counts
from dagster_reconf.core.spark.termination import await_termination
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import (
    committed_batches,
    copy_offset_entry,
    copy_source_logs,
    drop_planned_after,
    last_committed_batch,
)
from dagster_reconf.core.store.state_versions import carry_state_version, drop_uncommitted_state
from dagster_reconf.core.store.storage import Location

if TYPE_CHECKING:
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["BATCH_TIMEOUT_S", "next_precopy_round", "replay_batches", "replay_merged"]

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
    """Run committed batches ``batch_ids`` of checkpoint ``old`` again, one by one with their logged offsets, into
    checkpoint ``new``.

    Each batch's offset entry is copied (with ``spec``'s state partitions) and a once-trigger
    query, output discarded, runs exactly that planned batch. A batch after a gap in ``batch_ids`` is one a precopy
    merged (:func:`replay_merged`): it runs again as it ran, from its start entry, with the state carried to its id.
    Returns, per batch run, its id in ``new``, the seconds from the query's start to its end, the batch's own share of
    them (Spark's ``triggerExecution``), and its state operators' row counts (Spark's progress).

    Raises:
        StreamStateError: a batch failed or did not commit.
    """
    copy_source_logs(old, new)
    runs = []
    previous = None
    for source_batch in batch_ids:
        batch_id = source_batch + shift  # a precopy's batches run one id later than the live ones
        if batch_id in committed_batches(new):
            previous = source_batch
            continue  # an earlier attempt got this far
        if previous is not None and source_batch > previous + 1:  # merged by a precopy: from its start entry
            copy_offset_entry(old, new, source_batch - 1, spec.state_partitions, as_batch=batch_id - 1)
            carry_state_version(new, previous + shift + 1, batch_id, spec.state_partitions)
        copy_offset_entry(old, new, source_batch, spec.state_partitions, as_batch=batch_id)
        runs.append(_run_planned_batch(runtime, new, batch_id, spec, purpose))
        previous = source_batch
    return runs


def replay_merged(
    runtime: StreamRuntime, old: Location, new: Location, batch_ids: list[int], spec: StreamSpec, shift: int = 1
) -> dict[str, Any]:
    """Run consecutive batches ``batch_ids`` of checkpoint ``old`` again as one batch of checkpoint ``new``: one
    query start for all of them, not one each.

    ``new`` must be committed at ``batch_ids[0] - 1 + shift``. The merged batch takes the offsets from before the first
    batch to the end of the last one, the last one's watermark and timestamp, and runs under the last one's id (plus
    ``shift``), so the ids stay aligned with ``old``'s: the state it starts from is carried to that id first
    (:func:`~dagster_reconf.core.store.state_versions.carry_state_version`), and the ids skipped have no entries.
    Exact only for operators whose state does not depend on where batches end
    (:func:`~dagster_reconf.core.reconfig.operators.merge_problems`), and given the same rows dropped as late: the
    record's ``merged`` names the batches, its ``state`` counts compare with the last one's and the sum of theirs.

    Raises:
        StreamStateError: ``new`` is not where the merge starts, or the merged batch failed or did not commit.
    """
    first, last = batch_ids[0], batch_ids[-1]
    if batch_ids != list(range(first, last + 1)):
        raise StreamStateError(f"batches {batch_ids} of {old} are not consecutive: they cannot be merged")
    start, batch_id = first - 1 + shift, last + shift
    if batch_id in committed_batches(new):  # an earlier attempt ran it; its counts are not known here
        return {"batch_id": batch_id, "merged": batch_ids, "seconds": 0.0, "batch_s": 0.0, "state": None}
    if last_committed_batch(new) != start:
        raise StreamStateError(
            f"{new} is committed at batch {last_committed_batch(new)}, not {start}: batches {first}-{last} of {old} "
            "cannot be merged onto it"
        )
    copy_source_logs(old, new)
    drop_planned_after(new, start)  # what a merge that died before its commit planned
    drop_uncommitted_state(new, start + 1)  # and wrote
    copy_offset_entry(old, new, first - 1, spec.state_partitions, as_batch=batch_id - 1)  # where the merge begins
    copy_offset_entry(old, new, last, spec.state_partitions, as_batch=batch_id)
    carry_state_version(new, start + 1, batch_id, spec.state_partitions)
    return {**_run_planned_batch(runtime, new, batch_id, spec, "precopy"), "merged": batch_ids}


def _run_planned_batch(
    runtime: StreamRuntime, checkpoint: Location, batch_id: int, spec: StreamSpec, purpose: str
) -> dict[str, Any]:
    """Run the batch planned last in ``checkpoint`` (``batch_id``) in a once-trigger query; its record."""
    started = time.monotonic()
    query = runtime.start_query(spec, checkpoint=checkpoint, purpose=purpose, once=True)
    try:
        if not await_termination(query, BATCH_TIMEOUT_S):
            raise StreamStateError(
                f"{purpose} of batch {batch_id} into {checkpoint} did not finish in {BATCH_TIMEOUT_S:g} s"
            )
        if query.exception() is not None:
            raise StreamStateError(
                f"{purpose} of batch {batch_id} into {checkpoint} failed: "
                + str(query.exception()).strip().splitlines()[0]
            )
    finally:
        query.stop()
    if batch_id not in committed_batches(checkpoint):
        raise StreamStateError(f"{purpose} of batch {batch_id} into {checkpoint} ran but did not commit")
    progress = dict(query.lastProgress or {})
    return {
        "batch_id": batch_id,
        "seconds": round(time.monotonic() - started, 3),
        "batch_s": (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000,
        "state": state_row_counts(progress),
    }


def next_precopy_round(
    behind: int,
    last_delta: int | None,
    per_batch_s: float,
    copy_s: float,
    recopied: bool,
    close_enough: int,
    merged: bool = False,
) -> Literal["replay", "recopy", "stop"]:
    """What a precopy does next, with its copy ``behind`` batches behind the live stream.

    Its last round replayed ``last_delta`` batches (None: no round on this copy yet) at
    ``per_batch_s`` each. Close enough: stop. A round that ended further behind than it began
    means the replay is slower than the stream: a fresh copy where it costs less than
    replaying the delta (once), otherwise stop (more rounds only lose). As far behind as it
    began (the stream committed as many batches as the round replayed) is no loss: another round.
    ``merged`` rounds (one batch each) cost about a query start whatever they replay: never a fresh copy.
    """
    if behind <= close_enough:
        return "stop"
    if last_delta is not None and behind > last_delta:
        return "stop" if merged or recopied or behind * per_batch_s <= copy_s else "recopy"
    return "replay"
