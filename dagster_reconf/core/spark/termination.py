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
    """An error in one line: Spark's messages run on with the plan and a JVM stack. Where the message carries a
    Python traceback (a ``foreachBatch`` function or a UDF that raised), its exception line is the one that says what
    went wrong; else the message's first line."""
    text = str(getattr(exc, "desc", None) or exc).strip()
    if not text:
        return type(exc).__name__
    lines = text.splitlines()
    marker = next((k for k, line in enumerate(lines) if "Traceback (most recent call last):" in line), None)
    if marker is not None:
        after = lines[marker + 1 :]
        raised = next((line for line in after if line and not line.startswith((" ", "\t"))), None)
        if raised:
            return raised.strip()
    return lines[0]
