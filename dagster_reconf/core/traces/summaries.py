"""CP summaries of a snapshot, each beside the conventional view.

The conventional view is "share of time": how much of all worker-time an activity
type, worker or operator took. CP says how much of it was on the critical path. The
difference is the insight: a worker that is busy 90 % of the time but never on the
critical path is not the bottleneck; a 5 % operator with 40 % CP is.

* ``by_activity_type``: CP and time share per activity type.
* ``by_worker``: per worker (executor core slot, or the driver): stragglers come first.
* ``by_operator``: per logical operator (stable across micro-batches).
* ``by_channel``: per communication channel (sender -> receiver worker).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dagster_reconf.core.traces.critical_path import Snapshot, critical_path_length

__all__ = ["edge_frame", "summarize", "what_if_parallelism"]

DRIVER_OPERATOR = "driver"


def edge_frame(activities: pd.DataFrame, result: Snapshot) -> pd.DataFrame:
    """One row per graph edge: worker, channel, activity type, operator, duration, CP."""
    graph = result.graph
    table = activities.reset_index(drop=True)
    rows = graph.activity
    has_row = rows >= 0
    operator = np.full(len(rows), DRIVER_OPERATOR, dtype=object)
    operator[has_row] = table["operator"].to_numpy(dtype=object)[rows[has_row]]
    operator[graph.edge_type == "waiting"] = "-"
    src_worker = graph.edge_worker
    dst_worker = graph.edge_dst_worker
    return pd.DataFrame(
        {
            "worker": src_worker,
            "channel": np.where(src_worker == dst_worker, None, src_worker + " -> " + dst_worker),
            "activity": graph.edge_type,
            "operator": operator,
            "duration_ms": graph.weight,
            "cp": result.edge_cp,
        }
    )


def _beside(frame: pd.DataFrame, key: str, time_of: pd.Series) -> pd.DataFrame:
    out = frame.groupby(key, dropna=True).agg(cp=("cp", "sum"), time_ms=("duration_ms", "sum"))
    out["time_share"] = out["time_ms"] / float(time_of.sum()) if float(time_of.sum()) > 0 else 0.0
    out["cp_minus_time_share"] = out["cp"] - out["time_share"]
    return out.sort_values("cp", ascending=False).reset_index()


def summarize(activities: pd.DataFrame, result: Snapshot) -> dict[str, pd.DataFrame]:
    """The four summaries of a snapshot (CP sums to 1 across each of the first three)."""
    edges = edge_frame(activities, result)
    timeline = edges[edges["channel"].isna()]
    messages = edges[edges["channel"].notna()]
    by_worker = _beside(timeline, "worker", timeline["duration_ms"])
    # Messages count toward their sender's CP, so the worker summary also sums to 1.
    sent = messages.groupby("worker")["cp"].sum()
    by_worker["cp"] = by_worker["cp"] + by_worker["worker"].map(sent).fillna(0.0)
    by_worker["cp_minus_time_share"] = by_worker["cp"] - by_worker["time_share"]
    busy = timeline[timeline["activity"] != "waiting"].groupby("worker")["duration_ms"].sum()
    by_worker["busy_share"] = by_worker["worker"].map(busy).fillna(0.0) / (
        result.graph.window_end - result.graph.window_start
    )
    return {
        "by_activity_type": _beside(edges, "activity", edges["duration_ms"]),
        "by_worker": by_worker.sort_values("cp", ascending=False, ignore_index=True),
        "by_operator": _beside(
            edges[edges["operator"] != "-"], "operator", edges.loc[edges["operator"] != "-", "duration_ms"]
        ),
        "by_channel": _beside(messages, "channel", messages["duration_ms"]).assign(
            messages=lambda f: f["channel"].map(messages.groupby("channel").size())
        ),
    }


def what_if_parallelism(activities: pd.DataFrame, result: Snapshot, operator: str, workers: int) -> dict[str, float]:
    """Critical path length of the snapshot if ``operator`` ran on ``workers`` workers.

    Assumes the operator's work divides evenly over workers (its task activities shrink
    by current/new workers); everything else stays. Returns the current and predicted
    critical path lengths in ms and the operator's current number of workers.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    edges = edge_frame(activities, result)
    of_operator = (edges["operator"] == operator).to_numpy() & edges["channel"].isna().to_numpy()
    if not of_operator.any():
        known = sorted(set(edges["operator"]) - {"-", DRIVER_OPERATOR})
        raise ValueError(f"operator {operator!r} has no activity in this snapshot; operators: {known}")
    current = int(edges.loc[of_operator, "worker"].nunique())
    scale = np.ones(len(edges))
    scale[of_operator] = current / workers
    return {
        "operator_workers": float(current),
        "current_ms": critical_path_length(result.graph),
        "predicted_ms": critical_path_length(result.graph, scale),
    }
