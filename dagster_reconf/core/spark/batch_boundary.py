"""Stop a stream's query at a batch boundary.

A stop returns only when the query is stopped *and* its checkpoint's last batch is committed (the precondition of
Spark's offline state repartition), for any source: at once, unless a running batch has already written (one of its
Spark jobs succeeded): then at its commit, before the next batch can write. A batch the stop interrupted before any
of its Spark jobs succeeded has reached no sink (:mod:`dagster_reconf.core.spark.batch_jobs`): its plan is dropped
and the next start plans it again, as if the stop had come before it. Otherwise the interrupted batch is finished
from the offset log (a once-trigger run re-runs the planned, uncommitted batch with its logged offsets, into the
stream's own sink, and nothing after it). Sinks that are exactly-once by batch id (files, idempotent
``foreachBatch``) see no difference; an at-least-once sink may see the interrupted batch's rows twice, as after any
failure.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.progress.lifecycle import Stopped
from dagster_reconf.core.spark.batch_jobs import batch_has_written, batch_may_have_written
from dagster_reconf.core.spark.termination import await_termination, first_line
from dagster_reconf.core.store.checkpoint import checkpoint_facts, drop_planned_batch

if TYPE_CHECKING:
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["StopReport", "stop_at_batch_boundary"]


@dataclass(frozen=True)
class StopReport:
    """How a stop at a batch boundary went.

    Attributes:
        last_committed_batch: the batch the checkpoint ends at.
        seconds: from the request to the stopped, committed checkpoint.
        attempts: 1 when the query was stopped between triggers; 2 when a batch was
            interrupted (then finished from the offset log, dropped, or left to the next driver).
        finished_batch: the interrupted batch that was finished, if any.
        dropped_batch: the interrupted batch no sink had seen, whose plan was dropped (planned
            again at the next start), if any.
    """

    last_committed_batch: int | None
    seconds: float
    attempts: int
    finished_batch: int | None = None
    dropped_batch: int | None = None


POLL_INTERVAL_S = 0.02  # how often the wait for a running batch's commit looks


def stop_at_batch_boundary(
    runtime: StreamRuntime,
    timeout_s: float = 120.0,
    *,
    finish: bool = True,
    keep_interrupted: bool = False,
    boundary_wait_s: float | None = None,
) -> StopReport:
    """Stop with the checkpoint's last batch committed (see module docstring).

    ``finish=False`` leaves an interrupted batch planned but uncommitted, for a driver that
    finishes it next (a warm standby with more cores, after a handover); the report's
    ``attempts`` is 2 and ``finished_batch`` None then. One no sink saw is dropped even so,
    unless ``keep_interrupted``: then the next start runs it first, at the size it was
    planned with (a batch of the old cap on the new cores, where a re-planned one would
    take the new cap's catch-up batch); nor does it wait for a running batch that has
    written (the next start re-runs it from the offset log, as after a failure).
    ``boundary_wait_s`` caps the wait for a running batch's commit (default: 1.5x the
    last batch, at least 1 s; 0 interrupts it).
    """
    if finish and keep_interrupted:
        raise ValueError("keep_interrupted needs finish=False: a finished batch is committed, not kept")
    finish = finish and runtime.delivery().sink_restarts  # a batch is finished by a query started from the checkpoint
    with runtime.lock:
        started = time.monotonic()
        deadline = started + timeout_s
        if not runtime.is_active:
            info = checkpoint_facts(runtime.paths.checkpoint)
            if info.committed or not finish:
                return StopReport(info.last_committed_batch, 0.0, 0)
            finished = _finish_pending(runtime, deadline, timeout_s)  # a driver died mid-batch
            return _stopped(runtime, started, 1, finished)
        assert runtime.query is not None
        commit_wait_s = max(1.0, 1.5 * runtime.last_batch_s())
        if boundary_wait_s is not None:
            commit_wait_s = min(commit_wait_s, boundary_wait_s)
        if commit_wait_s > 0 and not keep_interrupted and _running_batch_wrote(runtime):
            # Interrupted now, it would be re-run (a query start plus the batch): the rest of it costs less. A kept
            # batch is re-run by the next start anyway, on more cores, where waiting would add the next batch.
            _await_next_commit(runtime, min(deadline, started + commit_wait_s))
        run_id = str(runtime.query.runId)
        runtime.query.stop()
        info = checkpoint_facts(runtime.paths.checkpoint)
        if info.committed:
            return _stopped(runtime, started, 1, None)
        # It interrupted a batch: one that had not written, or one begun since the check.
        assert info.last_offset_batch is not None
        if not keep_interrupted and not batch_may_have_written(runtime.spark, run_id, info.last_offset_batch):
            drop_planned_batch(runtime.paths.checkpoint, info.last_offset_batch)
            return _stopped(runtime, started, 2, None, dropped=info.last_offset_batch)
        return _stopped(runtime, started, 2, _finish_pending(runtime, deadline, timeout_s) if finish else None)


def _await_next_commit(runtime: StreamRuntime, until: float) -> bool:
    """Wait until the running batch commits, until ``until``. Stopping right then interrupts the next batch before
    any of its jobs could succeed, so it is dropped and planned again; stopping at a random moment instead often
    finds it written and re-runs it, which costs a query start on top of the batch."""
    assert runtime.query is not None
    last = runtime.last_batch_id()  # Spark reports a batch's progress once its commit is written
    while time.monotonic() < until and runtime.query.exception() is None:
        if runtime.last_batch_id() != last:
            return True
        time.sleep(POLL_INTERVAL_S)
    return False


def _finish_pending(runtime: StreamRuntime, deadline: float, timeout_s: float) -> int | None:
    """Re-run exactly the checkpoint's planned, uncommitted batch into the stream's sink, then stop."""
    info = checkpoint_facts(runtime.paths.checkpoint)
    if info.committed:
        return None
    runtime.check_checkpoint_matches(runtime.spec)
    query = runtime.start_query(once=True)
    runtime.query = query
    runtime.paths.add_query_id(str(query.id))
    if not await_termination(query, max(1.0, deadline - time.monotonic())):
        query.stop()
        raise StreamStateError(
            f"stream {runtime.spec.name!r}: the interrupted batch {info.last_offset_batch} did not "
            f"finish within {timeout_s:g} s; it is finished when the stream starts again"
        )
    if query.exception() is not None:
        raise StreamStateError(
            f"stream {runtime.spec.name!r}: finishing batch {info.last_offset_batch} failed: "
            f"{first_line(query.exception())}"
        )
    after = checkpoint_facts(runtime.paths.checkpoint)
    if not after.committed:
        raise StreamStateError(f"stream {runtime.spec.name!r}: batch {after.last_offset_batch} is still not committed")
    return info.last_offset_batch


def _stopped(
    runtime: StreamRuntime, started: float, attempts: int, finished: int | None, dropped: int | None = None
) -> StopReport:
    info = checkpoint_facts(runtime.paths.checkpoint)
    report = StopReport(info.last_committed_batch, time.monotonic() - started, attempts, finished, dropped)
    runtime.store.append(Stopped(stream=runtime.spec.name, **asdict(report)).to_record())
    return report


def _running_batch_wrote(runtime: StreamRuntime) -> bool:
    """Whether a batch is running and one of its Spark jobs has succeeded: it may have reached its sink. Otherwise
    a stop now drops it (the next start plans it again), and nothing waits for it."""
    assert runtime.query is not None
    info = checkpoint_facts(runtime.paths.checkpoint)
    if info.committed or info.last_offset_batch is None:
        return False
    return batch_has_written(runtime.spark, str(runtime.query.runId), info.last_offset_batch)
