"""One PNG that shows where a snapshot's critical path went, read at a glance.

Three panels, CP beside the share of time for each: by activity type, by worker, by
operator. A bar far longer in CP than in time is where to look.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["cp_plot_png"]

_PANELS = (("by_activity_type", "activity"), ("by_worker", "worker"), ("by_operator", "operator"))
_MAX_BARS = 8


def _short(label: str, width: int = 28) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def cp_plot_png(summaries: dict[str, pd.DataFrame], title: str) -> bytes:
    """PNG bytes of the CP-vs-time-share panels for one snapshot's summaries."""
    fig, axes = plt.subplots(1, len(_PANELS), figsize=(15, 4.2), dpi=90)
    for ax, (name, key) in zip(axes, _PANELS):
        frame = summaries[name].head(_MAX_BARS).iloc[::-1]
        positions = range(len(frame))
        ax.barh([p + 0.2 for p in positions], frame["cp"], height=0.4, label="critical participation", color="#d1495b")
        ax.barh([p - 0.2 for p in positions], frame["time_share"], height=0.4, label="share of time", color="#8d99ae")
        ax.set_yticks(list(positions), [_short(str(v)) for v in frame[key]])
        ax.set_xlim(0, 1)
        ax.set_title(name.replace("_", " "))
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=9, ncols=2)
    fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
