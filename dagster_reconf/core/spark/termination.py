"""A query's end: wait for it, and say in one line why it failed."""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming import StreamingQuery

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
    """The first line of an error: Spark's messages run on with the plan and a JVM stack."""
    text = str(getattr(exc, "desc", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
