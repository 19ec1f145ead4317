"""A running stream's status, as the driver reports it to ``reconf stream status``, sensors and preflight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_reconf.core.spark.connectors import kafka_connector
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
    spec = runtime.spec
    known = {"name": spec.name, "entrypoint": spec.entrypoint, "master": spec.master, "spec": spec.model_dump()}
    if not runtime.lock.acquire(timeout=LOCK_WAIT_S):
        record = runtime.store.last_progress()
        checkpoint = checkpoint_facts(runtime.paths.checkpoint)
        return {
            **known,
            "state": "busy",
            **status_figures(record),
            "delivery": runtime.delivery(record).as_dict(),
            "checkpoint": checkpoint.summary(),
        }
    try:
        record = runtime.store.last_progress()
        failure = runtime.failure
        checkpoint = checkpoint_facts(runtime.paths.checkpoint)
        spark, query = runtime.session_if_started, runtime.query
        delivery = runtime.delivery(record)
        uses_kafka = spark is not None and ("kafka" in delivery.sources or delivery.sink == "kafka")
        return {
            **known,
            "state": "running" if runtime.is_active else ("failed" if failure else "stopped"),
            "failure": failure,
            "app_id": spark.sparkContext.applicationId if spark is not None else None,
            "spark_ui": spark.sparkContext.uiWebUrl if spark is not None else None,
            "executors": len(executor_ids(spark)) if spark is not None and spec.executors is not None else None,
            "run_id": str(query.runId) if query is not None else None,
            "query_id": str(query.id) if query is not None else None,
            "query_status": query.status.get("message") if runtime.is_active else None,
            "query_idle": _idle(query.status) if runtime.is_active else None,
            **status_figures(record),
            "delivery": delivery.as_dict(),
            "kafka_connector": kafka_connector(spark).as_dict() if uses_kafka else None,
            "checkpoint": checkpoint.summary(),
        }
    finally:
        runtime.lock.release()


def _idle(status: dict[str, Any]) -> bool:
    """Whether the query waits with nothing offered: no batch running, no data available."""
    return not status.get("isTriggerActive") and not status.get("isDataAvailable")
