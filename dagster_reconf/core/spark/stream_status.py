"""A running stream's status, as the driver reports it to ``reconf stream status``, sensors and preflight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_reconf.core.spark.executors import executor_ids
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import status_figures

if TYPE_CHECKING:
    from dagster_reconf.core.spark.runtime import StreamRuntime

__all__ = ["LOCK_WAIT_S", "stream_status"]

LOCK_WAIT_S = 2.0  # status answers "busy" rather than wait longer behind a control operation


def stream_status(runtime: StreamRuntime) -> dict[str, Any]:
    """Where the stream stands: state, last batch figures, backlog, state rows.

    It never waits long behind a control operation (a stop, a migration): then ``state`` is ``busy`` and the
    figures are the metrics store's and the checkpoint's, without the session's."""
    if not runtime.lock.acquire(timeout=LOCK_WAIT_S):
        return {
            "name": runtime.spec.name,
            "entrypoint": runtime.spec.entrypoint,
            "state": "busy",
            "master": runtime.spec.master,
            **status_figures(runtime.store.last_progress()),
            "delivery": runtime.delivery().as_dict(),
            "checkpoint": checkpoint_facts(runtime.paths.checkpoint).summary(),
            "spec": runtime.spec.model_dump(),
        }
    try:
        record = runtime.store.last_progress()
        failure = runtime.failure
        state = "running" if runtime.is_active else ("failed" if failure else "stopped")
        checkpoint = checkpoint_facts(runtime.paths.checkpoint)
        spark = runtime.session_if_started
        return {
            "name": runtime.spec.name,
            "entrypoint": runtime.spec.entrypoint,
            "state": state,
            "failure": failure,
            "app_id": spark.sparkContext.applicationId if spark is not None else None,
            "spark_ui": spark.sparkContext.uiWebUrl if spark is not None else None,
            "master": runtime.spec.master,
            "executors": len(executor_ids(spark)) if spark is not None and runtime.spec.executors is not None else None,
            "run_id": str(runtime.query.runId) if runtime.query is not None else None,
            "query_id": str(runtime.query.id) if runtime.query is not None else None,
            "query_status": runtime.query.status.get("message") if runtime.is_active else None,
            "query_idle": _idle(runtime.query.status) if runtime.is_active else None,
            **status_figures(record),
            "delivery": runtime.delivery(record).as_dict(),
            "checkpoint": checkpoint.summary(),
            "spec": runtime.spec.model_dump(),
        }
    finally:
        runtime.lock.release()


def _idle(status: dict[str, Any]) -> bool:
    """Whether the query waits with nothing offered: no batch running, no data available."""
    return not status.get("isTriggerActive") and not status.get("isDataAvailable")
