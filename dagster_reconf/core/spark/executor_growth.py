"""Grow a running stream's executors ahead of a reconfiguration, and warm them before its pause needs them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.progress.lifecycle import ExecutorsResized
from dagster_reconf.core.spark.executor_room import DEFAULT_EXECUTOR_MEMORY, executor_room_problem
from dagster_reconf.core.spark.executors import completed_tasks, executor_ids, resize_executors
from dagster_reconf.core.spark.warm_up import warm_up_file_write, warm_up_job

if TYPE_CHECKING:
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["add_executors"]

EXECUTOR_START_WAIT_S = 90.0  # a new context's executors register (and its surplus is removed) within this
EXECUTOR_WARM_WAIT_S = 30.0  # the most that warming executors added ahead of a pause may take
WARM_BATCHES = 2  # batches committed once added executors registered: the stream's whole plan had its chance there


def add_executors(runtime: StreamRuntime, count: int, wait_s: float = EXECUTOR_START_WAIT_S) -> dict[str, Any]:
    """Grow to ``count`` executors while the query runs, ahead of a reconfiguration that resumes with that many
    (their JVMs start outside its pause); never removes any: that waits for the pause.

    Then warms them (see :func:`_await_warm`): a cold executor's first tasks load classes, compile the query's
    code and open the state store, which took seconds per task and, paid by the batch a pause finishes, most of
    that pause.

    Raises:
        StreamStateError: the spec has no ``cores_ceiling``, ``count`` is above it, or the master has no room for
            them (found before asking where its web UI answers, else when they have not come within ``wait_s``;
            the request is then withdrawn, so none joins later).
    """
    with runtime.lock:
        spec = runtime.spec
        if spec.executors is None or spec.cores_ceiling is None or spec.executor_cores is None:
            raise StreamStateError(
                f"stream {spec.name!r} has no cores_ceiling: its executors are not resized in "
                "place (a cores change starts a new SparkContext)"
            )
        if count * spec.executor_cores > spec.cores_ceiling:
            raise StreamStateError(
                f"{count} executors of {spec.executor_cores} cores are above stream "
                f"{spec.name!r}'s cores_ceiling {spec.cores_ceiling}"
            )
        held = executor_ids(runtime.spark)
        live = len(held)
        if count <= live:
            return {"added": 0, "executors": live}
        memory = spec.executor_memory_setting
        room = executor_room_problem(
            spec.master,
            count - live,
            executor_cores=spec.executor_cores,
            executor_memory=memory,
            home=runtime.paths.home,
        )
        if room:
            raise StreamStateError(room)
        resized = resize_executors(runtime.spark, count, wait_s=wait_s)
        runtime.store.append(ExecutorsResized(stream=spec.name, **resized.as_dict()).to_record())
        if resized.after < count:
            resize_executors(runtime.spark, resized.after)
            raise StreamStateError(
                f"{resized.after} of {count} executors of stream {spec.name!r} registered within {wait_s:.0f} s: "
                f"master {spec.master} placed no more. Each needs {spec.executor_cores} free core(s) and "
                f"{memory or DEFAULT_EXECUTOR_MEMORY} of free memory on one worker; give the workers more, "
                "or lower executor_memory"
                + (
                    f" (the {resized.after - live} that came stay until the stream restarts)"
                    if resized.after > live
                    else ""
                )
            )
        added = [i for i in executor_ids(runtime.spark) if i not in held]
    warm = _await_warm(runtime, added, EXECUTOR_WARM_WAIT_S)  # without the lock: status answers meanwhile
    return {
        "added": resized.after - resized.before,
        "executors": resized.after,
        "seconds": resized.seconds,
        "warm": warm,
    }


def _await_warm(runtime: StreamRuntime, added: list[str], wait_s: float) -> dict[str, Any]:
    """Warm executors just added, before a pause needs them.

    A small job first puts tasks on each (classes, code generation, a Python worker; the scheduler spreads
    tasks over free slots, so each gets some, nearly always in one go), a throwaway stateful query opens the
    state store there (the stream's own stateful tasks keep to the executors that hold their state, so its
    batches alone would not: its first stateful tasks on an added executor then took ~4 s, in the pause's
    batch), and a small file write loads the file writer. Then the stream's own batches run on them for
    ``WARM_BATCHES`` batches, bounded by a few batch lengths and ``wait_s`` (an idle stream runs no batch: a pause
    then has none to finish either). Executors still without a completed task are reported.
    """
    started = time.monotonic()
    first = runtime.last_batch_id()
    slots = len(executor_ids(runtime.spark)) * (runtime.spec.executor_cores or 1)
    cold = list(added)
    for _ in range(3):
        warm_up_job(runtime.spark, 4 * slots)
        tasks = completed_tasks(runtime.spark)
        cold = [i for i in added if not tasks.get(i)]
        if not cold:
            break
    state_stores = runtime.warm_up_state_stores(4 * slots)
    file_writer = runtime.scratch_warm_up(warm_up_file_write, 4 * slots)
    job_s = time.monotonic() - started
    deadline = started + min(
        wait_s, job_s + 2.0 + 2 * WARM_BATCHES * max(runtime.spec.trigger_interval_s, runtime.last_batch_s())
    )
    batches = 0
    while runtime.is_active and time.monotonic() < deadline:
        last = runtime.last_batch_id()
        batches = 0 if last is None else last - (first if first is not None else -1)
        if batches >= WARM_BATCHES:
            break
        time.sleep(0.5)
    return {
        "cold": cold,
        "batches": batches,
        "jobs_s": round(job_s, 3),
        "state_stores": state_stores,
        "file_writer": file_writer,
        "seconds": round(time.monotonic() - started, 3),
    }
