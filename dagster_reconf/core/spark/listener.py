"""A StreamingQueryListener that appends every progress event to the metrics store.

Spark's REST API has no Structured Streaming endpoint, so live metrics come from a
listener in the driver. Listener callbacks run on Spark's listener bus thread, off the
query's own thread: writing a line here does not slow the micro-batch down (the
throughput benchmark measures what it does cost).

Each progress crosses from the JVM as Spark's own JSON, in one Py4J call: PySpark's
bridge copies it field by field instead, every field a call back into the JVM run on
the listener bus thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from py4j.java_gateway import JavaObject
from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from dagster_reconf.core.progress.lifecycle import QueryStarted, QueryTerminated
from dagster_reconf.core.store.metrics import MetricsStore

__all__ = ["ProgressRecorder"]


class _JsonProgressBridge:
    """The Java listener interface PySpark's own bridge implements, handing each progress over as JSON."""

    def __init__(self, recorder: ProgressRecorder) -> None:
        self.recorder = recorder

    def onQueryStarted(self, jevent: JavaObject) -> None:
        self.recorder.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: JavaObject) -> None:
        self.recorder.record_progress(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: JavaObject) -> None:
        """Idle ticks carry no new figures (and are not converted: nothing reads them)."""

    def onQueryTerminated(self, jevent: JavaObject) -> None:
        self.recorder.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressRecorder(StreamingQueryListener):
    """Records the progress of the query named ``stream`` (others, the control plane's helper queries
    among them, are ignored).

    ``cpu_probe``, if given, is sampled with every progress event and recorded as
    ``python_cpu_s`` (a counter: the Python workers' CPU seconds so far, see
    :mod:`dagster_reconf.core.spark.python_worker_cpu`; None where it cannot be measured); ``cpu_samples``, if given, is
    drained likewise into ``python_cpu_samples`` (that counter's ``[epoch ms, CPU ms]``
    samples since the last batch, see :class:`~dagster_reconf.core.spark.python_worker_cpu.PythonCpuSampler`), and
    ``worker_count``, if given,
    into ``python_workers`` (how many Python workers there are after the batch). ``python_task_cpu_ms``, if given,
    is recorded with every batch as is (PySpark's own CPU per Python task here, see
    :mod:`dagster_reconf.core.spark.python_task_overhead`). ``source_probe``, if given,
    measures what the progress does not say about each source (a file source's unread
    files, see :class:`~dagster_reconf.core.progress.source_kinds.FileBacklogProbe`), recorded as ``sources``.
    """

    def __init__(
        self,
        store: MetricsStore,
        stream: str,
        cpu_probe: Callable[[], float | None] | None = None,
        source_probe: Callable[[dict], list[dict]] | None = None,
        *,
        cpu_samples: Callable[[], list[list[float]]] | None = None,
        worker_count: Callable[[], int | None] | None = None,
        python_task_cpu_ms: float | None = None,
    ) -> None:
        self.store = store
        self.stream = stream
        self.cpu_probe = cpu_probe
        self.cpu_samples = cpu_samples
        self.worker_count = worker_count
        self.python_task_cpu_ms = python_task_cpu_ms
        self.source_probe = source_probe
        self.last_progress: dict | None = None
        self.failure: str | None = None
        self._run_ids: set[str] = set()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        if event.name == self.stream:
            self._run_ids.add(str(event.runId))
            self.failure = None
            self.store.append(
                QueryStarted(stream=self.stream, run_id=str(event.runId), query_id=str(event.id)).to_record()
            )

    @property
    def _jlistener(self) -> JavaObject:
        """What ``spark.streams.addListener`` registers: PySpark's wrapper around the JSON bridge above."""
        if not hasattr(self, "_jlistenerobj"):
            jvm = SparkContext._jvm
            if jvm is None:
                raise RuntimeError(
                    "ProgressRecorder needs a running SparkContext: start the SparkSession first, then "
                    "spark.streams.addListener(recorder)"
                )
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_JsonProgressBridge(self))
        return self._jlistenerobj

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        self.record_progress(json.loads(event.progress.json))

    def record_progress(self, progress: dict) -> None:
        """Appends one progress (Spark's JSON of it) with the figures the probes add."""
        if progress.get("name") != self.stream:
            return
        self.last_progress = progress
        record = {"kind": "progress", "stream": self.stream, "progress": progress}
        if self.cpu_probe is not None:
            record["python_cpu_s"] = self.cpu_probe()
        if self.cpu_samples is not None:
            record["python_cpu_samples"] = self.cpu_samples()
        if self.worker_count is not None:
            record["python_workers"] = self.worker_count()
        if self.python_task_cpu_ms is not None:
            record["python_task_cpu_ms"] = self.python_task_cpu_ms
        if self.source_probe is not None:
            try:
                record["sources"] = self.source_probe(progress)
            except Exception as exc:  # a figure missing is better than a progress record lost
                record["sources_error"] = f"{type(exc).__name__}: {exc}"
        self.store.append(record)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """Idle ticks carry no new figures; the last progress stays current."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        if str(event.runId) not in self._run_ids:
            return
        if event.exception:
            self.failure = event.exception
        self.store.append(
            QueryTerminated(stream=self.stream, run_id=str(event.runId), exception=event.exception).to_record()
        )
