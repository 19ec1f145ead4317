"""What a stream's sources and sink guarantee across a stop and restart, from Spark's progress: positive evidence only.

A reconfiguration stops the query at a batch boundary and starts it again from the checkpoint. That loses nothing
only where every source can re-read what its offsets log says (:data:`RESUMES_EXACTLY`): files, Kafka, the rate
sources and Python data sources (whose reader contract is to read any logged offset range again). A socket keeps no
offsets and drops the lines in flight; a memory stream lives in one driver; a source of a kind this module does not
know is assumed to do neither, unless its stream definition declares ``replayable=True``.

The sink sets what a replayed batch does to the output (:data:`SINK_GUARANTEES`): the file sink and an idempotent
``foreachBatch`` write each batch exactly once; Kafka and ``foreach`` at least once; the console promises nothing;
Spark's memory sink cannot restart from a checkpoint at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dagster_reconf.core.progress.source_kinds import source_kind

__all__ = ["RESUMES_EXACTLY", "SINK_GUARANTEES", "Delivery", "delivery", "sink_kind"]

RESUMES_EXACTLY = frozenset({"file", "kafka", "rate", "rate-micro-batch", "python"})

# sink kind -> its end-to-end guarantee when its sources resume exactly
SINK_GUARANTEES = {
    "file": "exactly-once",
    "foreachBatch": "exactly-once if the foreachBatch function is idempotent by batch id, else at-least-once",
    "kafka": "at-least-once",
    "foreach": "at-least-once",
    "console": "none (console output)",
    "noop": "none (output discarded)",
    "memory": "none: the memory sink cannot restart from a checkpoint",
    "unknown": "unknown",
}
_SINKS = (
    ("FileSink[", "file"),
    ("ForeachBatchSink", "foreachBatch"),
    ("KafkaTable", "kafka"),
    ("KafkaSink", "kafka"),
    ("ForeachWriterTable", "foreach"),
    ("ForeachSink", "foreach"),
    ("ConsoleTable", "console"),
    ("ConsoleSink", "console"),
    ("NoopTable", "noop"),
    ("MemorySink", "memory"),
)


def sink_kind(description: str) -> str:
    """The kind of a sink, from Spark's description of it (a key of :data:`SINK_GUARANTEES`)."""
    return next((kind for marker, kind in _SINKS if marker in description), "unknown")


@dataclass(frozen=True)
class Delivery:
    """What a stop and restart does to a stream's data.

    Attributes:
        sources: each source's kind, in Spark's order.
        sink: the sink's kind.
        restartable: the query can stop and start again from its checkpoint without losing input.
        guarantee: the end-to-end guarantee, in words (``exactly-once``, ``at-least-once``, ...).
        problems: why it is not restartable, a line each naming the source or sink and the fix (empty: it is).
        loss_accepted: the spec accepts losing in-flight input (``accept_loss``); ``restartable`` then holds
            while ``problems`` still says what is lost.
    """

    sources: list[str]
    sink: str
    restartable: bool
    guarantee: str
    problems: list[str] = field(default_factory=list)
    loss_accepted: bool = False

    @property
    def sink_restarts(self) -> bool:
        """Whether the sink's query can start again from its checkpoint (all but Spark's memory sink)."""
        return self.sink != "memory"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def delivery(progress: dict[str, Any] | None, *, replayable: bool | None = None, accept_loss: bool = False) -> Delivery:
    """The delivery of a stream from its last progress record's ``progress`` (None: no batch has run).

    Args:
        replayable: the stream definition's declaration about its sources (None: decided from their kinds).
        accept_loss: the spec accepts losing what a source that cannot resume had in flight.
    """
    progress = progress or {}
    descriptions = [str(s.get("description") or "") for s in progress.get("sources") or []]
    sources = [source_kind(d) for d in descriptions]
    sink_description = str((progress.get("sink") or {}).get("description") or "")
    sink = sink_kind(sink_description)
    problems = []
    if not sources:
        problems.append("no batch has run yet, so its sources are not known: wait for its first batch")
    if replayable is not True:
        for kind, description in zip(sources, descriptions, strict=True):
            if kind not in RESUMES_EXACTLY:
                problems.append(_lossy_source(kind, description))
    if sink == "memory":
        problems.append(
            f"sink {sink_description} is Spark's memory sink, which cannot restart from a checkpoint; write to a "
            "sink that recovers (files, Kafka, an idempotent foreachBatch)"
        )
    loses_input = any("cannot resume" in p for p in problems)
    restartable = not problems or (accept_loss and all("cannot resume" in p for p in problems))
    guarantee = SINK_GUARANTEES[sink]
    if loses_input:
        guarantee = "at-most-once (in-flight input is lost at a restart)" if accept_loss else "none (see problems)"
    return Delivery(sources, sink, restartable, guarantee, problems, accept_loss and loses_input)


def _lossy_source(kind: str, description: str) -> str:
    why = {
        "socket": "a socket source keeps no offsets: the lines in flight at a stop are lost, and a restarted query "
        "fails on its checkpoint's offsets",
        "memory": "a memory stream lives in one driver: a restarted query cannot read it again",
    }.get(kind, f"a source of unknown kind ({description[:80]!r}) is not known to re-read its logged offsets")
    return (
        f"{kind} source cannot resume exactly: {why}. Use a source that can (files, Kafka, a Python data source), "
        "declare replayable=True on the stream definition if it can re-read its offsets, or set accept_loss=True "
        "on the spec to accept losing the input in flight"
    )
