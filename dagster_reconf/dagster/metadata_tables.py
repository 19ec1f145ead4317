"""Metadata a person reads: tables with a schema, figures rounded to what was measured, units in the labels.

Dagster shows a ``MetadataValue.table`` as a table with typed columns, where Markdown and JSON show as a collapsed
block of text. Every figure dagster-reconf records goes through here:

* :func:`frame_table`: a DataFrame as a typed table, floats to three significant digits (what a batch duration or a
  rate measured over a few batches supports);
* :func:`figures_table`: named figures as (figure, value, unit) rows, the unit read from the name's suffix
  (``_ms``, ``_s``, ``_rate``, ...) by :func:`unit_of`.
"""

import math
from collections.abc import Mapping
from typing import Any

import dagster as dg
import pandas as pd

__all__ = ["figures_table", "frame_table", "round_figure", "settings_table", "unit_of"]

SIGNIFICANT = 3
# A figure's unit from its name, first match wins: (test on the name, unit). A name none matches is a count.
_UNITS = (
    (lambda n: "_ms_" in n + "_", "ms"),
    (lambda n: n.endswith("_per_s") or any(w in n for w in ("rate", "capacity", "backlog_growth")), "events/s"),
    (lambda n: n.endswith("_s"), "s"),
    (lambda n: "backlog" in n, "events"),
    (lambda n: "utilization" in n, "share of the interval"),
    (lambda n: "share" in n, "share"),
    (lambda n: n.endswith("_bytes"), "bytes"),
)


def unit_of(name: str) -> str:
    """The unit of the figure named ``name`` ("" where its name says none)."""
    return next((unit for matches, unit in _UNITS if matches(name)), "")


def round_figure(value: Any, significant: int = SIGNIFICANT) -> Any:
    """``value`` to ``significant`` digits where it is a float (integers, text and None as they are; NaN as None)."""
    if isinstance(value, bool) or not isinstance(value, float):
        return value
    if not math.isfinite(value):
        return None if math.isnan(value) else value
    if value == 0:
        return 0.0
    digits = significant - 1 - math.floor(math.log10(abs(value)))
    return round(value, max(digits, 0)) if digits > 0 else float(round(value))


def frame_table(frame: pd.DataFrame, descriptions: Mapping[str, str] | None = None) -> dg.TableMetadataValue:
    """``frame`` as a typed table: int, float, bool and string columns, floats rounded (:func:`round_figure`)."""
    columns = []
    for name, dtype in frame.dtypes.items():
        kind = (
            "bool"
            if pd.api.types.is_bool_dtype(dtype)
            else "int"
            if pd.api.types.is_integer_dtype(dtype)
            else "float"
            if pd.api.types.is_float_dtype(dtype)
            else "string"
        )
        columns.append(dg.TableColumn(str(name), kind, description=(descriptions or {}).get(str(name))))
    records = [dg.TableRecord({str(k): _cell(v) for k, v in row.items()}) for row in frame.to_dict(orient="records")]
    return dg.MetadataValue.table(records, schema=dg.TableSchema(columns=columns))


def figures_table(figures: Mapping[str, Any], unit: str | None = None) -> dg.TableMetadataValue:
    """Named figures as rows of (figure, value, unit), values rounded; the unit ``unit``, or read from each name
    (:func:`unit_of`)."""
    rows = [{"figure": name, "value": _value(value), "unit": unit or unit_of(name)} for name, value in figures.items()]
    return dg.MetadataValue.table(
        [dg.TableRecord(row) for row in rows],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("figure", "string"),
                dg.TableColumn("value", "float"),
                dg.TableColumn("unit", "string"),
            ]
        ),
    )


def settings_table(settings: Mapping[str, Any]) -> dg.TableMetadataValue:
    """Nested settings (a plan's ``model_dump()``) as rows of (setting, value): nested keys joined by dots, values
    as text, unset ones left out."""
    flat = pd.json_normalize([dict(settings)], sep=".").iloc[0].to_dict() if settings else {}
    rows = [{"setting": k, "value": str(_cell(v))} for k, v in flat.items() if v is not None and v != {}]
    return dg.MetadataValue.table(
        [dg.TableRecord(row) for row in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn("setting", "string"), dg.TableColumn("value", "string")]),
    )


def _value(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    number = float(value)
    return round_figure(number) if math.isfinite(number) else None


def _cell(value: Any) -> str | int | float | bool | None:
    """A table cell: numbers rounded, numpy scalars as Python ones, anything else as its text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return round_figure(value)
    if hasattr(value, "item"):  # a numpy scalar
        return _cell(value.item())
    if isinstance(value, (list, dict, tuple)):
        return str(value)
    return None if pd.isna(value) else str(value)
