"""Add and remove executors in a running SparkContext: a cores change without a new context.

Why: a new SparkContext costs an application registration, every executor's JVM start and
Python worker warm-up, all inside a reconfiguration's pause. On a standalone master, Spark's
scheduler backend changes how many executors an application holds within its
``spark.cores.max`` (``SparkContext.requestTotalExecutors`` and ``killExecutors``: the
developer API dynamic allocation itself uses; Trisk keeps executors warm the same way). A
stream whose spec has a ``cores_ceiling`` runs with ``spark.cores.max`` at that ceiling and
its ``max_cores`` in executors.

Spark's own dynamic allocation is not used: it sizes executors by pending tasks, and with it
on, ``killExecutors`` is refused. Without it the master launches executors up to the ceiling
when the application registers; :func:`resize_executors` removes the surplus as they come.

Executors are removed while the query is stopped: removing one that runs a batch's tasks
would fail them. Added executors are not waited for in a pause: the query starts on those
there are and takes the others as they register.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from dagster_reconf.core.errors import StreamStateError

__all__ = ["ExecutorResize", "completed_tasks", "executor_ids", "resize_executors"]

POLL_S = 0.5
STABLE_POLLS = 6  # registered == wanted this many polls in a row (3 s): late registrations have come (at start)


@dataclass
class ExecutorResize:
    """What a resize did: executors before and after, the ones removed, and how long it took."""

    wanted: int
    before: int
    after: int
    removed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def executor_ids(spark: SparkSession) -> list[str]:
    """The application's active executors (the driver not included), oldest first.

    Not those being removed: a killed executor stays registered for seconds while its JVM exits, and counting it
    would make a resize just after a scale-down think it holds one more than it does.
    """
    sc = spark.sparkContext
    ids = [str(i) for i in sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(sc._jsc.sc().getExecutorIds())]  # type: ignore[union-attr]
    if ids:  # a cluster's scheduler backend (local mode has no executors to list)
        backend = sc._jsc.sc().schedulerBackend()  # type: ignore[union-attr]
        ids = [i for i in ids if backend.isExecutorActive(i)]
    return sorted(ids, key=lambda i: (len(i), i))


def completed_tasks(spark: SparkSession) -> dict[str, int]:
    """Tasks each executor has completed so far (from the application's status store, as the UI shows it)."""
    sc = spark.sparkContext
    summaries = sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(sc._jsc.sc().statusStore().executorList(True))  # type: ignore[union-attr]
    return {str(s.id()): int(s.completedTasks()) for s in summaries if str(s.id()) != "driver"}


def _request_total(spark: SparkSession, count: int) -> None:
    sc = spark.sparkContext
    jvm = sc._jvm
    no_locality = jvm.PythonUtils.toScalaMap(jvm.java.util.HashMap())  # type: ignore[union-attr]
    if not sc._jsc.sc().requestTotalExecutors(count, 0, no_locality):  # type: ignore[union-attr]
        raise StreamStateError(
            f"the cluster manager of {sc.master} does not resize executors in place; remove "
            "cores_ceiling from the spec (a cores change then starts a new SparkContext)"
        )


def _kill(spark: SparkSession, ids: list[str]) -> None:
    sc = spark.sparkContext
    sc._jsc.sc().killExecutors(sc._jvm.PythonUtils.toSeq(ids))  # type: ignore[union-attr]


def _settled(count: int, stable: int, launched: Callable[[], int | None] | None) -> bool:
    """No more executors will register: the cluster manager launched no more than ``count``, or (where it cannot
    tell) ``count`` stayed registered for :data:`STABLE_POLLS` polls."""
    if not stable:  # fewer than count registered
        return False
    known = launched() if launched is not None else None
    return known <= count if known is not None else stable >= STABLE_POLLS


def resize_executors(
    spark: SparkSession,
    count: int,
    *,
    wait_s: float = 0.0,
    settle: bool = False,
    launched: Callable[[], int | None] | None = None,
) -> ExecutorResize:
    """Hold ``count`` executors: ask the master for that many, remove the newest beyond it.

    Args:
        wait_s: wait up to this long until ``count`` are registered (0: do not wait for added ones).
        settle: also wait until no more register (just after the context started, when the master
            launched executors up to the ceiling); surplus ones are removed as they come.
        launched: how many executors the cluster manager has launched for the application, registered
            or not (None: it cannot tell). With it, settling ends when that is ``count``; without it,
            after ``count`` stayed registered for a few seconds, which a loaded machine can outlast
            (an executor JVM launched with the others registers later).

    Raises:
        StreamStateError: the cluster manager refuses to resize, or ``count`` is not positive.
    """
    if count < 1:
        raise StreamStateError(f"a stream needs at least one executor, asked for {count}")
    started = time.monotonic()
    deadline = started + wait_s
    removed: list[str] = []
    before = len(executor_ids(spark))
    _request_total(spark, count)
    stable = 0
    while True:
        live = executor_ids(spark)  # killed ones are left out at once (marked for removal before the kill returns)
        surplus = live[count:]
        if surplus:
            _kill(spark, surplus)
            removed.extend(surplus)
            _request_total(spark, count)  # a kill lowers the master's target by the killed count: set it again
            live = live[:count]
        stable = stable + 1 if len(live) == count else 0
        done = len(live) >= count and (not settle or _settled(count, stable, launched))
        if done or time.monotonic() >= deadline:
            return ExecutorResize(count, before, len(live), removed, round(time.monotonic() - started, 3))
        time.sleep(POLL_S)
