"""Building the activity table's columns fast: task-end tables as flat numpy columns, and activity rows gathered as
numpy pieces with strings kept as integer codes until Arrow expands them once (see
:mod:`dagster_reconf.core.traces.activities`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_reconf.core.traces.event_schema import ACTIVITY_COLUMNS, ACTIVITY_TYPES

__all__ = ["ActivityRows", "decode", "task_columns"]


def task_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """Flat numpy columns of a task-end table: missing numbers as 0, flags as False."""
    flat = table.flatten().flatten().flatten()
    out: dict[str, np.ndarray] = {}
    for name in flat.column_names:
        column = flat.column(name)
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
            out[name] = column.fill_null(0).to_numpy().astype(np.float64)
        elif pa.types.is_boolean(column.type):
            out[name] = column.fill_null(False).to_numpy(zero_copy_only=False)
        else:
            out[name] = np.array(
                column.fill_null("Success" if name.endswith("Reason") else "").to_pylist(), dtype=object
            )
    out["no_metrics"] = table.column("Task Metrics").is_null().to_numpy(zero_copy_only=False)
    return out


class ActivityRows:
    """Activity rows of a batch of tasks, gathered as numpy pieces and built as one Arrow table.

    Strings (workers, operators, ...) stay integer codes into small dictionaries until
    the end, where Arrow expands them in C++: building them as Python strings was the
    slowest part of ingestion.
    """

    def __init__(self) -> None:
        self.pieces: list[tuple[np.ndarray, int, np.ndarray, np.ndarray, Any, Any, Any, bool]] = []

    def add(
        self,
        tasks: np.ndarray,
        activity: str,
        start: np.ndarray,
        end: np.ndarray,
        worker: Any,
        src: Any = -1,
        dst: Any = -1,
        traffic: bool = False,
    ) -> None:
        """Rows for ``tasks`` (indexes into the batch); worker codes per row or one for all, -1 for none."""
        if len(tasks):
            self.pieces.append((tasks, ACTIVITY_TYPES.index(activity), start, end, worker, src, dst, traffic))

    def table(
        self,
        app_id: str | None,
        per_task: dict[str, np.ndarray],
        traffic: dict[str, np.ndarray],
        labels: dict[str, tuple[list[Any], np.ndarray]],
        worker_names: list[str],
    ) -> pa.Table:
        tasks = np.concatenate([p[0] for p in self.pieces])
        spread = lambda i: np.concatenate([np.broadcast_to(np.asarray(p[i]), len(p[0])) for p in self.pieces])  # noqa: E731
        with_traffic = spread(7)
        workers = pa.array(worker_names, pa.large_string())
        columns = {
            "app_id": pa.nulls(len(tasks), pa.large_string())
            if app_id is None
            else pa.repeat(pa.scalar(app_id, pa.large_string()), len(tasks)),
            **{name: per_task[name][tasks] for name in per_task},
            **{name: decode(values, codes[tasks]) for name, (values, codes) in labels.items()},
            "worker": decode(workers, spread(4)),
            "src_worker": decode(workers, spread(5)),
            "dst_worker": decode(workers, spread(6)),
            "activity": decode(ACTIVITY_TYPES, spread(1)),
            "start_ms": spread(2).astype(np.float64),
            "end_ms": spread(3).astype(np.float64),
            **{
                name: np.where(with_traffic, values[tasks], 0).astype(np.float64 if name == "cpu_ms" else np.int64)
                for name, values in traffic.items()
            },
        }
        return pa.table({name: columns[name] for name in ACTIVITY_COLUMNS})


def decode(values: Any, codes: np.ndarray) -> pa.Array:
    """``values[codes]`` as an Arrow string array; code -1 is null.

    Large strings, which pandas' string dtype holds: ``to_pandas`` then need not copy them again.
    """
    codes = np.asarray(codes, dtype=np.int64)
    indices = pa.array(codes, mask=codes < 0)
    return pc.take(values if isinstance(values, pa.Array) else pa.array(values, pa.large_string()), indices)
