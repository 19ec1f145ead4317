"""What a stream's sources and sink guarantee across a stop and restart, from Spark's progress: positive evidence only.

A reconfiguration stops the query at a batch boundary and starts it again from the checkpoint. That loses nothing
only where every source can re-read what its offsets log says (:data:`RESUMES_EXACTLY`): files, Kafka, the rate
sources and Python data sources (whose reader contract is to read any logged offset range again). A source of a kind
this module does not know is assumed not to, unless its stream definition declares ``replayable=True``; the spec's
``accept_loss=True`` lets such a stream restart losing its input in flight. A socket and a memory stream cannot
restart from a checkpoint at all (:data:`NEVER_RESTART`: a socket's new connection counts its offsets from the start
again, a memory stream's rows lived in the old query's driver), so neither a declaration nor ``accept_loss`` lets
their query be stopped.

The sink sets what a replayed batch does to the output (:data:`SINK_GUARANTEES`): the file sink and an idempotent
``foreachBatch`` write each batch exactly once; Kafka and ``foreach`` at least once; the console promises nothing;
Spark's memory sink cannot restart from a checkpoint at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dagster_reconf.core.progress.source_kinds import source_kind

__all__ = ["NEVER_RESTART", "RESUMES_EXACTLY", "SINK_GUARANTEES", "Delivery", "delivery", "sink_kind"]

RESUMES_EXACTLY = frozenset({"file", "kafka", "rate", "rate-micro-batch", "python"})
# source kind -> why its query cannot start again from its checkpoint, whatever the spec accepts
NEVER_RESTART = {
    "socket": "a socket source keeps no offsets: the lines in flight at a stop are lost, and the restarted query "
    "fails on its checkpoint's offsets (Spark: 'Offsets committed out of order')",
    "memory": "a memory stream's rows live in the driver of the query that added them: a restarted query cannot "
    "read them again",
}

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
    for kind, description in zip(sources, descriptions, strict=True):
        if kind in NEVER_RESTART:
            problems.append(
                f"{kind} source cannot restart from a checkpoint: {NEVER_RESTART[kind]}. Neither accept_loss nor "
                "replayable=True can change that: run the stream without stopping it, or move it to a source that "
                "keeps offsets (files, Kafka, a Python data source)"
            )
        elif kind not in RESUMES_EXACTLY and replayable is not True:
            problems.append(
                f"{kind} source cannot resume exactly: a source of unknown kind ({description[:80]!r}) is not known "
                "to re-read its logged offsets. Use a source that can (files, Kafka, a Python data source), declare "
                "replayable=True on the stream definition if it can re-read its offsets, or set accept_loss=True on "
                "the spec to accept losing the input in flight"
            )
    if sink == "memory":
        problems.append(
            f"sink {sink_description} is Spark's memory sink, which cannot restart from a checkpoint; write to a "
            "sink that recovers (files, Kafka, an idempotent foreachBatch)"
        )
    loses_input = any("cannot resume" in p for p in problems)
    restartable = not problems or (accept_loss and all("cannot resume" in p for p in problems))
    guarantee = SINK_GUARANTEES[sink]
    never = sorted({kind for kind in sources if kind in NEVER_RESTART})
    if never:
        guarantee = f"at-most-once ({' and '.join(never)} input is lost whenever the query stops)"
    elif loses_input:
        guarantee = "at-most-once (in-flight input is lost at a restart)" if accept_loss else "none (see problems)"
    return Delivery(sources, sink, restartable, guarantee, problems, accept_loss and loses_input)
