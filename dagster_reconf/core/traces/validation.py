"""Great Expectations 1.x suites for trace snapshots and CP summaries (see
:mod:`dagster_reconf.core.traces.expectations`)."""

from __future__ import annotations

import pandas as pd

from dagster_reconf.core.traces.event_schema import ACTIVITY_COLUMNS, ACTIVITY_TYPES
from dagster_reconf.core.traces.expectations import ValidationOutcome, gx_module, validate_frame

__all__ = ["ValidationOutcome", "validate_activities", "validate_cp_sum"]

CP_SUM_TOLERANCE = 1e-9


def validate_activities(activities: pd.DataFrame) -> ValidationOutcome:
    """Schema and invariants of an activity table: columns, end >= start, known types, counts >= 0."""
    gx = gx_module()
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
    return validate_frame(activities, "trace_snapshot", expectations)


def validate_cp_sum(cp_by_activity_type: pd.DataFrame) -> ValidationOutcome:
    """CP over a snapshot sums to 1 and every CP value lies in [0, 1]."""
    gx = gx_module()
    expectations = [
        gx.expectations.ExpectColumnSumToBeBetween(
            column="cp", min_value=1 - CP_SUM_TOLERANCE, max_value=1 + CP_SUM_TOLERANCE
        ),
        gx.expectations.ExpectColumnValuesToBeBetween(column="cp", min_value=0, max_value=1 + CP_SUM_TOLERANCE),
    ]
    return validate_frame(cp_by_activity_type, "cp_summary", expectations)
