"""Versioned JSON sensor cursors: one reader, so every sensor treats a bad cursor the same way.

A cursor is a JSON object with a ``version``. One that is empty, undecodable, of another
version or rejected by the sensor's own check gives the sensor's fresh cursor; the last
three log a warning saying what the sensor does instead (Dagster keeps a cursor across
deploys, so a new version must never stop a sensor).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg

__all__ = ["parse_cursor"]

T = TypeVar("T")


def parse_cursor(
    raw: str | None,
    version: int,
    build: Callable[[dict[str, Any]], T],
    fresh: Callable[[], T],
    context: dg.SensorEvaluationContext | None,
    instead: str,
) -> T:
    """``build(data)`` from the cursor ``raw`` of ``version``, else ``fresh()`` (logged with ``instead``).

    ``build`` raises ValueError, TypeError, KeyError or AttributeError for data it refuses.
    """
    if not raw:
        return fresh()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != version:
            raise ValueError(f"unsupported cursor version {data.get('version') if isinstance(data, dict) else data!r}")
        return build(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        if context is not None:
            context.log.warning(f"Failed to interpret cursor {raw[:200]!r} ({exc}); {instead}.")
        return fresh()
