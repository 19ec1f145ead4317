"""Python CPU per task and per event, from one configuration: *when* the workers spent it.

A Python stage's CPU per batch is ``c * e + t * n`` (``e`` events, ``n`` tasks): ``t`` is a
worker's set-up for a task (unpickling the reader or function, opening its Arrow streams),
``c`` its work per event. Every batch of one configuration has the same ``n`` and about the
same ``e``, so batch totals cannot separate them (``cost_split.fit_task_costs`` needs a second
configuration). The timing can: set-up comes in a burst as a task starts (and tear-down
as it ends), per-event CPU spreads over the task. The Python workers' CPU counter, sampled
ten times a second (``python_workers.PythonCpuSampler``), is cut into bins; each bin's CPU
is regressed, by non-negative least squares, on the tasks of each Python operator that
started in it, those that ended in it, and the events they processed in it (a task's
events spread evenly over its span).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import nnls

__all__ = ["PythonCosts", "split_python_cpu"]

BIN_MS = 500.0  # a set-up burst (~0.1 s on this machine) falls mostly in the bin its task started in
MIN_BINS = 12  # fewer bins with Python work: no fit
MIN_STARTS = 4  # fewer task starts in readable bins: no fit
MIN_R2 = 0.5  # the fit explains this share of the bins' variance (bursts at the tasks' starts and ends) ...
MAX_RESIDUAL = 0.35  # ... or its RMS residual stays under this share of a bin's mean CPU (flat, per-event CPU)
_MAX_GAP_MS = 400.0  # a bin edge this far from any sample cannot be read off the counter


@dataclass(frozen=True)
class PythonCosts:
    """One Python operator's CPU milliseconds per task and per source event, as fitted."""

    per_task_ms: float
    per_event_ms: float


def split_python_cpu(tasks: pd.DataFrame, samples: np.ndarray, bin_ms: float = BIN_MS) -> dict[str, PythonCosts]:
    """Each Python operator's CPU per task and per source event, or ``{}`` where the samples cannot tell.

    Args:
        tasks: one row per task of the Python operators: ``operator``, ``start_ms``,
            ``end_ms``, ``events`` (the source events it processed).
        samples: ``[epoch ms, CPU ms]`` rows of the workers' CPU counter, in time order.
        bin_ms: the width of a bin.
    """
    if tasks.empty or len(samples) < 2:
        return {}
    times, counter = samples[:, 0], samples[:, 1]
    edges = np.arange(tasks["start_ms"].min(), tasks["end_ms"].max() + bin_ms, bin_ms)
    if len(edges) < 2:
        return {}
    after = np.searchsorted(times, edges)  # the samples on either side of each edge
    nearest = np.minimum(
        np.abs(times[np.clip(after, 0, len(times) - 1)] - edges),
        np.abs(times[np.clip(after - 1, 0, len(times) - 1)] - edges),
    )
    cpu = np.diff(np.interp(edges, times, counter))
    readable = (nearest[:-1] <= _MAX_GAP_MS) & (nearest[1:] <= _MAX_GAP_MS) & (cpu >= 0)  # a dip: a worker reaped

    operators = sorted(tasks["operator"].unique())
    design = np.zeros((len(edges) - 1, 3 * len(operators)))  # per operator: starts, ends, events
    column = {op: 3 * i for i, op in enumerate(operators)}
    start, end = tasks["start_ms"].to_numpy(float), tasks["end_ms"].to_numpy(float)
    events = tasks["events"].to_numpy(float)
    cols = tasks["operator"].map(column).to_numpy()
    for offset, moment in ((0, start), (1, end)):
        np.add.at(
            design, (np.clip(np.searchsorted(edges, moment, side="right") - 1, 0, len(edges) - 2), cols + offset), 1.0
        )
    overlap = np.clip(
        np.minimum(edges[1:][None, :], end[:, None]) - np.maximum(edges[:-1][None, :], start[:, None]), 0, None
    )
    spread = overlap / np.maximum(end - start, 1.0)[:, None] * events[:, None]  # tasks x bins
    for op, col in column.items():
        design[:, col + 2] = spread[cols == col].sum(axis=0)

    busy = readable & (design.sum(axis=1) > 0)
    if busy.sum() < MIN_BINS or design[busy][:, 0::3].sum() < MIN_STARTS:
        return {}
    x, y = design[busy], cpu[busy]
    coef, _ = nnls(x, y)
    residual = float(np.mean((x @ coef - y) ** 2))
    explained = 1.0 - residual / float(y.var()) if y.var() > 0 else 0.0
    if y.mean() <= 0 or (explained < MIN_R2 and np.sqrt(residual) > MAX_RESIDUAL * y.mean()):
        return {}
    return {
        op: PythonCosts(per_task_ms=float(coef[col] + coef[col + 1]), per_event_ms=float(coef[col + 2]))
        for op, col in column.items()
    }
