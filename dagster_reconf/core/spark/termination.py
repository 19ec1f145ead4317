"""A query's end: wait for it, and say in one line why it failed."""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming import StreamingQuery

from dagster_reconf.core.errors import summary_line

__all__ = ["await_termination", "first_line"]


def await_termination(query: StreamingQuery, timeout_s: float) -> bool:
    """Whether ``query`` ended within ``timeout_s``; a query that failed has ended too (pyspark raises its failure
    from ``awaitTermination``: callers read it from ``query.exception()`` and say what failed)."""
    try:
        return bool(query.awaitTermination(timeout_s))
    except Exception:  # StreamingQueryException: the query's own failure
        if query.exception() is None:
            raise
        return True


def first_line(exc: Any) -> str:
    """An error in one line (:func:`~dagster_reconf.core.errors.summary_line`)."""
    return summary_line(str(getattr(exc, "desc", None) or exc)) or type(exc).__name__
