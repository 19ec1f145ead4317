"""Great Expectations 1.x suites for trace snapshots and CP summaries.

GX is used directly (dagster-ge does not support GX 1.x): an ephemeral context, a
pandas data source, one expectation suite per kind of frame. Analytics are turned off
before GX is imported (there is no network, and no data should leave the machine).

The results come back as :class:`ValidationOutcome`: whether everything passed, and
one readable line per failed expectation (column, what was expected, what was seen),
which the Dagster asset checks show as is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .activities import ACTIVITY_COLUMNS, ACTIVITY_TYPES

__all__ = ["ValidationOutcome", "validate_activities", "validate_cp_sum"]

CP_SUM_TOLERANCE = 1e-9


@dataclass
class ValidationOutcome:
    """GX's verdict on one frame."""

    success: bool
    evaluated: int
    failures: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.success:
            return f"all {self.evaluated} expectations passed"
        return f"{len(self.failures)} of {self.evaluated} expectations failed: " + "; ".join(self.failures)


def _gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    return gx


def _validate(frame: pd.DataFrame, name: str, expectations: list[Any]) -> ValidationOutcome:
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_pandas(f"{name}_source")
        .add_dataframe_asset(name)
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": frame})
    )
    suite = context.suites.add(gx.ExpectationSuite(name=f"{name}_suite", expectations=expectations))
    result = batch.validate(suite)
    failures = []
    for item in result.results:
        if item.success:
            continue
        config = item.expectation_config
        kwargs = {k: v for k, v in config.kwargs.items() if k not in ("batch_id",)}
        observed = _plain(item.result.get("observed_value", item.result.get("unexpected_count")))
        sample = _plain(item.result.get("partial_unexpected_list"))
        line = f"{config.type}({kwargs}) observed {observed!r}"
        if sample:
            line += f", e.g. {sample[:3]!r}"
        failures.append(line)
    return ValidationOutcome(bool(result.success), len(result.results), failures)


def _plain(value: Any) -> Any:
    """numpy scalars (inside lists and tuples too) as plain Python values, for readable messages."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def validate_activities(activities: pd.DataFrame) -> ValidationOutcome:
    """Schema and invariants of an activity table: columns, end >= start, known types, counts >= 0."""
    gx = _gx()
    expectations = [
        gx.expectations.ExpectTableColumnsToMatchSet(column_set=list(ACTIVITY_COLUMNS), exact_match=False),
        gx.expectations.ExpectColumnValuesToBeInSet(column="activity", value_set=list(ACTIVITY_TYPES)),
        gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(column_A="end_ms", column_B="start_ms", or_equal=True),
        gx.expectations.ExpectColumnValuesToNotBeNull(column="worker"),
        gx.expectations.ExpectColumnValuesToNotBeNull(column="start_ms"),
    ]
    expectations += [
        gx.expectations.ExpectColumnValuesToBeBetween(column=c, min_value=0)
        for c in ("records_in", "records_out", "bytes_in", "bytes_out", "cpu_ms")
    ]
    missing = [c for c in ("activity", "start_ms", "end_ms", "worker") if c not in activities.columns]
    if missing:
        return ValidationOutcome(False, 1, [f"activity table lacks columns {missing}: it is not a trace snapshot"])
    return _validate(activities, "trace_snapshot", expectations)


def validate_cp_sum(cp_by_activity_type: pd.DataFrame) -> ValidationOutcome:
    """CP over a snapshot sums to 1 and every CP value lies in [0, 1]."""
    gx = _gx()
    expectations = [
        gx.expectations.ExpectColumnSumToBeBetween(column="cp", min_value=1 - CP_SUM_TOLERANCE, max_value=1 + CP_SUM_TOLERANCE),
        gx.expectations.ExpectColumnValuesToBeBetween(column="cp", min_value=0, max_value=1 + CP_SUM_TOLERANCE),
    ]
    return _validate(cp_by_activity_type, "cp_summary", expectations)
