"""What a stream can do, checked at preflight rather than assumed.

* ``pause``: stop at a micro-batch boundary and start again from the checkpoint without losing input. Only where
  every source is known to resume exactly from its logged offsets and the sink can restart
  (:mod:`dagster_reconf.core.progress.delivery`): never a source of unknown kind (unless the definition declares it
  replayable, or the spec accepts the loss), and never a socket, a memory stream or Spark's ``memory`` sink.
* ``replay``: rebuild state from the source's retained data (the replay strategy). The
  sources must replay from logged offsets (files, Kafka, the rate sources, Python sources
  whose offsets are counters), unless the definition says otherwise, and the offset log
  must still start at batch 0.
* ``oracle``: the definition can compare the output with a batch job over the same input.

Read from the last progress record (the sources and the sink Spark reports) and the
checkpoint, so it holds for a stream the control plane has only seen run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dagster_reconf.core.definition import StreamDefinition
from dagster_reconf.core.progress.delivery import RESUMES_EXACTLY, Delivery, delivery
from dagster_reconf.core.progress.source_kinds import source_figures
from dagster_reconf.core.store.checkpoint import replay_problem
from dagster_reconf.core.store.storage import Location

__all__ = ["Capabilities", "stream_capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """Each capability, and why not where it is missing."""

    pause: bool
    replay: bool
    oracle: bool
    reasons: dict[str, str]
    replay_recent: bool = False  # the sources replay recent batches from their logged offsets (a precopy's delta)
    delivery: Delivery | None = None  # the sources' and sink's kinds and the end-to-end guarantee

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def stream_capabilities(
    definition: StreamDefinition,
    last_progress: dict[str, Any] | None,
    checkpoint: Location,
    *,
    accept_loss: bool = False,
) -> Capabilities:
    """The capabilities of a stream from its definition, its last progress record and its checkpoint (``accept_loss``:
    the spec's)."""
    reasons: dict[str, str] = {}
    progress = (last_progress or {}).get("progress") or {}
    found = delivery(progress, replayable=definition.replayable, accept_loss=accept_loss)
    pause = found.restartable
    if found.problems:
        reasons["pause"] = "; ".join(found.problems)
    if definition.replayable is not None:
        replay = definition.replayable
        if not replay:
            reasons["replay"] = f"stream definition {definition.name} declares its sources not replayable"
    else:
        kinds = [source_figures(s) for s in progress.get("sources") or []]
        odd = [
            f"{f.kind} source {f.description!r}"
            for f in kinds
            if f.kind not in RESUMES_EXACTLY or f.end is None and f.kind != "file"
        ]
        replay = bool(kinds) and not odd
        if odd:
            reasons["replay"] = (
                f"{', '.join(odd)} cannot replay from logged offsets; declare replayable=True on the "
                "definition if it can"
            )
        elif not kinds:
            reasons["replay"] = "no batch has run yet, so its sources are not known"
    replay_recent = replay
    problem = replay_problem(checkpoint) if replay else None
    if problem:
        replay, reasons["replay"] = False, problem
    oracle = definition.oracle is not None
    if not oracle:
        reasons["oracle"] = f"stream definition {definition.name} has no oracle to compare its output with"
    return Capabilities(pause, replay, oracle, reasons, replay_recent, found)
