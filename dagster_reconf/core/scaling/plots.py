"""One PNG per scaling plan: each operator's capacity now and planned, against the target rate."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["capacity_plot_png"]


def capacity_plot_png(report: pd.DataFrame, target_rate: float, title: str) -> bytes:
    """Bars of capacity (source events/s) per operator, now and planned; a line at the target rate.

    An operator whose "now" bar ends left of the line is a bottleneck; the plan moves
    every bar past it.
    """
    labels = [op.split(":", 1)[-1][:32] for op in report["operator"]]
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(9, 0.7 + 0.6 * max(len(labels), 1)), dpi=90)
    finite = lambda column: report[column].astype(float).replace([np.inf], np.nan)  # noqa: E731
    ax.barh(y - 0.2, finite("capacity_now_events_per_s"), height=0.4, label="capacity now", color="#c44e52")
    ax.barh(y + 0.2, finite("capacity_planned_events_per_s"), height=0.4, label="capacity planned", color="#55a868")
    ax.axvline(target_rate, color="black", linestyle="--", label=f"target {target_rate:,.0f} events/s")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("source events/s the operator keeps up with")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
