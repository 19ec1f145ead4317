"""Great Expectations 1.x, used directly (dagster-ge does not support GX 1.x).

An ephemeral context, a pandas data source, one expectation suite per kind of frame.
Analytics are turned off before GX is imported (there is no network, and no data
should leave the machine). The results come back as :class:`ValidationOutcome`:
whether everything passed, and one readable line per failed expectation (column, what
was expected, what was seen), which Dagster asset checks and the audit ledger show as is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["ValidationOutcome", "gx_module", "validate_frame"]


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


def gx_module() -> Any:
    """``great_expectations``, imported with analytics off."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    return gx


def validate_frame(frame: pd.DataFrame, name: str, expectations: list[Any]) -> ValidationOutcome:
    """Run ``expectations`` on ``frame`` in an ephemeral GX context."""
    gx = gx_module()
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
