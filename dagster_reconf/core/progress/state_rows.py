"""What one batch did to each stateful operator's rows, read from its Spark progress."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["StateCounts", "state_counts_by_batch", "state_row_counts"]

# per stateful operator, in plan order: numRowsTotal, numRowsUpdated, numRowsRemoved, numRowsDroppedByWatermark
StateCounts = list[dict[str, Any]]
_STATE_ROW_COUNTS = ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "numRowsDroppedByWatermark")


def state_row_counts(progress: dict[str, Any]) -> StateCounts:
    """What one batch did to each stateful operator's rows, from its Spark progress (see :data:`StateCounts`)."""
    return [{k: op.get(k) for k in _STATE_ROW_COUNTS} for op in progress.get("stateOperators") or []]


def state_counts_by_batch(records: Iterable[dict[str, Any]], batches: set[int]) -> dict[int, StateCounts]:
    """The state row counts of each of ``batches`` that ran (idle progress reports left out), from metrics records."""
    counts = {}
    for record in records:
        progress = record.get("progress") or {}
        if (
            record.get("kind") == "progress"
            and progress.get("batchId") in batches
            and "addBatch" in (progress.get("durationMs") or {})
        ):
            counts[progress["batchId"]] = state_row_counts(progress)
    return counts
