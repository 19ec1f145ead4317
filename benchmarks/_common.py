"""Shared helpers of the benchmarks: timing windows, medians, the final JSON line."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Iterable
from typing import Any


def parse_args(
    description: str, add_options: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    """``--quick`` and whatever ``add_options`` adds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (under 5 minutes)")
    if add_options is not None:
        add_options(parser)
    return parser.parse_args()


def median(values: Iterable[float]) -> float:
    values = list(values)
    return float(statistics.median(values)) if values else float("nan")


def emit(result: dict[str, Any]) -> None:
    """Print the benchmark's figures as one JSON line, last."""
    print(json.dumps(result, separators=(",", ":"), default=str), flush=True)
