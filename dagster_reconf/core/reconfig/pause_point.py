"""When a pause stops the live query: between its batches, where that costs the pause least.

A stop that interrupts a running batch throws its work away (the resumed query does it again) and waits for its tasks
to be cancelled; a stop between batches costs almost nothing. So where a batch committed before the stop costs the
pause no more than its data, the pause first lets the batch in flight commit, at most 1.5 of the stream's recent
batches: the stream still runs meanwhile, so that wait is not downtime.
"""

from __future__ import annotations

import time
from typing import Any

from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.storage import Location

__all__ = ["BOUNDARY_POLL_S", "await_batch_boundary", "batch_in_flight_may_commit"]

BOUNDARY_POLL_S = 0.05  # a checkpoint listing per poll (object storage: a few requests), for at most 1.5 batches


def await_batch_boundary(checkpoint: Location, batch_s: float | None) -> float:
    """Wait until the live stream has no batch in flight (at most 1.5 of its recent batches ``batch_s``, at least
    1 s); the seconds waited."""
    started = time.monotonic()
    deadline = started + max(1.0, 1.5 * (batch_s or 0.0))
    while not checkpoint_facts(checkpoint).committed and time.monotonic() < deadline:
        time.sleep(BOUNDARY_POLL_S)
    return round(time.monotonic() - started, 3)


def batch_in_flight_may_commit(strategy: str, needs_migration: bool, precopy: dict[str, Any] | None) -> bool:
    """Whether a pause lets the batch in flight commit before it stops the query: where a committed batch costs the
    pause only its data. True for a native migration (it repartitions whatever batch the checkpoint ends at) and for a
    precopy whose pause replays the batches since its last round as one (``precopy``: what prepare made; a failed one
    falls back to native). False where nothing migrates (an interrupted batch stays planned for the new settings), for
    the replay strategy and a precopy that replays batch by batch (each committed batch costs the pause a query
    start)."""
    if not needs_migration:
        return False
    if strategy == "native":
        return True
    return strategy == "precopy" and precopy is not None and ("failed" in precopy or bool(precopy.get("merge")))
