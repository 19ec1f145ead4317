"""What one batch did to each stateful operator's rows, read from its Spark progress."""

from __future__ import annotations

from typing import Any

__all__ = ["StateCounts", "state_row_counts"]

StateCounts = list[dict[str, Any]]  # per stateful operator, in plan order: numRowsTotal, numRowsUpdated, numRowsRemoved
_STATE_ROW_COUNTS = ("numRowsTotal", "numRowsUpdated", "numRowsRemoved")


def state_row_counts(progress: dict[str, Any]) -> StateCounts:
    """What one batch did to each stateful operator's rows, from its Spark progress (see :data:`StateCounts`)."""
    return [{k: op.get(k) for k in _STATE_ROW_COUNTS} for op in progress.get("stateOperators") or []]
