"""Could an interrupted micro-batch have reached its sink? Spark's status store says.

A query stopped mid-batch leaves the batch planned (in the offset log) but not
committed, and Spark re-runs it with the same offsets on restart because its sink may
have written it. A sink writes only through Spark jobs, though, and a micro-batch's jobs
carry their query run and batch in their description (``runId = ...``, ``batch = N``;
``foreachBatch`` functions inherit it). So when no job of the batch succeeded, and no
job that cannot be told apart from it did either, no sink has seen the batch: its plan
can be dropped and the batch planned again from the last committed offsets, as if the
stop had come before it. A pause then costs no re-run of a batch the stop interrupted.
Asked before the stop instead (:func:`batch_has_written`), it says whether the running
batch has already written: only then is it worth waiting for that batch to commit.

Conservative where it cannot tell: a status store it cannot read, jobs evicted from it,
jobs still running, or a job without a batch's description (a ``foreachBatch`` writer on
a thread of its own) that succeeded after the batch before: the batch may have been
written, and it is finished as Spark would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["StreamJob", "batch_has_written", "batch_may_have_written", "may_have_written"]

_RUN = re.compile(r"^runId = (\S+)$", re.MULTILINE)
_BATCH = re.compile(r"^batch = (\d+)$", re.MULTILINE)
LISTENER_WAIT_MS = 10_000  # job ends reach the status store through the listener bus


@dataclass(frozen=True)
class StreamJob:
    """One Spark job as the status store lists it: its id, status, and the stream batch its description names."""

    job_id: int
    status: str  # SUCCEEDED, FAILED, RUNNING, UNKNOWN
    run_id: str | None = None
    batch_id: int | None = None

    @classmethod
    def from_description(cls, job_id: int, status: str, description: str | None) -> "StreamJob":
        run, batch = _RUN.search(description or ""), _BATCH.search(description or "")
        return cls(job_id, status, run.group(1) if run else None, int(batch.group(1)) if run and batch else None)


def may_have_written(jobs: list[StreamJob], run_id: str, batch_id: int, *, count_running: bool = True) -> bool:
    """Whether batch ``batch_id`` of query run ``run_id`` may have reached its sink (see module docstring).

    The jobs that count: this batch's own, and jobs without a batch's description that
    started after the last job of an earlier batch of this run. Without such an earlier
    job (the run's first batch, or its jobs evicted) every job without a description counts.
    ``count_running=False`` counts only jobs that succeeded: asked before a stop, which cancels
    the running ones.
    """
    earlier = [j.job_id for j in jobs if j.run_id == run_id and j.batch_id is not None and j.batch_id < batch_id]
    floor = max(earlier, default=-1)
    relevant = [
        j for j in jobs if (j.run_id == run_id and j.batch_id == batch_id) or (j.run_id is None and j.job_id > floor)
    ]
    return any(j.status == "SUCCEEDED" or (count_running and j.status != "FAILED") for j in relevant)


def batch_may_have_written(spark: SparkSession, run_id: str, batch_id: int) -> bool:
    """:func:`may_have_written` over this SparkContext's status store, once the job events queued so far reached it;
    True where the store cannot be read."""
    try:
        jobs = _listed_jobs(spark, LISTENER_WAIT_MS, run_id, batch_id)
    except Exception:  # noqa: BLE001 - Spark Connect, a stopped context, a changed internal API: assume written
        return True
    return may_have_written(jobs, run_id, batch_id)


def batch_has_written(spark: SparkSession, run_id: str, batch_id: int) -> bool:
    """Before a stop: whether a job of the running batch ``batch_id`` has succeeded, as the status store shows it now
    (no wait for queued events). False where it cannot be read: only whether the stop waits for the batch depends
    on this; what becomes of a batch it interrupts, :func:`batch_may_have_written` judges after it."""
    try:
        jobs = _listed_jobs(spark, 0, run_id, batch_id)
    except Exception:  # noqa: BLE001 - as above; the stop goes ahead at once
        return False
    return may_have_written(jobs, run_id, batch_id, count_running=False)


def _listed_jobs(spark: SparkSession, listener_wait_ms: int, run_id: str, batch_id: int) -> list[StreamJob]:
    """The jobs in this SparkContext's status store that can matter to batch ``batch_id`` of run ``run_id``, after
    waiting up to ``listener_wait_ms`` for queued events.

    The store lists jobs newest first: the reading stops at the last job of an earlier batch of
    the run (older jobs cannot count, see :func:`may_have_written`), so a stop reads a few jobs
    through py4j, not all the store retains (up to 1,000: about 0.5 s read whole).
    """
    sc = spark.sparkContext
    jsc = sc._jsc.sc()  # type: ignore[union-attr]
    if listener_wait_ms > 0:
        jsc.listenerBus().waitUntilEmpty(listener_wait_ms)
    listed = sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(jsc.statusStore().jobsList(None))  # type: ignore[union-attr]
    jobs: list[StreamJob] = []
    newest_first = True
    for j in listed:
        job = StreamJob.from_description(
            int(j.jobId()),
            str(j.status().toString()),
            str(j.description().get()) if j.description().isDefined() else None,
        )
        newest_first = newest_first and (not jobs or job.job_id < jobs[-1].job_id)
        jobs.append(job)
        if newest_first and job.run_id == run_id and job.batch_id is not None and job.batch_id < batch_id:
            break
    return jobs
