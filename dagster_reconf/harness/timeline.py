"""A stream's timeline from its metrics store: offered and processed rates, backlog and cores.

What a person checks after a closed-loop run: did the backlog stop growing after each
reconfiguration, and at what parallelism. Rates come from the source offsets
(``latest_offset`` offered, ``end_offset`` consumed) over a trailing window of a few
seconds, so batches that read a catch-up backlog show a processed rate above the
offered one.
Cores are the configuration in force, from the runtime's ``started``/``restarted``
records.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dagster_reconf.core.progress.lifecycle import Restarted, Started, lifecycle_event
from dagster_reconf.core.scaling.scaling_plan import known_cores  # noqa: E402
from dagster_reconf.core.spec import StreamSpec  # noqa: E402
from dagster_reconf.core.store.metrics import record_row  # noqa: E402

__all__ = ["TIMELINE_COLUMNS", "timeline_frame", "timeline_plot_png"]

RATE_WINDOW_S = 4.0  # rates are averaged over at least this long
TIMELINE_COLUMNS = ["at", "batch_id", "offered_per_s", "processed_per_s", "backlog_events", "cores"]


def timeline_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per committed batch: its trigger time (``at``, s since epoch) and the figures above."""
    rows, cores = [], None
    for record in records:
        event = lifecycle_event(record)
        if isinstance(event, (Started, Restarted)) and event.spec:
            cores = known_cores(StreamSpec.parse(event.spec))
        elif record.get("kind") == "progress":
            row = record_row(record)
            # The batch's trigger time: when Spark read the source's latest offset.
            rows.append(
                {
                    "at": row["timestamp"].timestamp(),
                    "batch_id": row["batch_id"],
                    "events": row["events"],
                    "end": row["end_offset"],
                    "backlog_events": row["backlog_events"],
                    "cores": cores,
                }
            )
    if not rows:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    frame = pd.DataFrame(rows).sort_values("at", ignore_index=True)
    if frame["end"].isna().any():  # offsets that do not count events: positions from the events consumed
        frame["end"] = frame["events"].astype(float).cumsum()
    frame["latest"] = frame["end"].astype(float) + frame["backlog_events"].astype(float)
    frame = frame.dropna(subset=["latest"]).reset_index(drop=True)
    if frame.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    # Over a trailing window, not batch to batch: records a few ms apart (a stop, a restart) would spike.
    at = frame["at"].to_numpy()
    earlier = np.searchsorted(at, at - RATE_WINDOW_S, side="right") - 1
    valid = earlier >= 0
    base = np.where(valid, earlier, 0)
    elapsed = np.where(valid, at - at[base], np.nan)
    for column, source in (("offered_per_s", "latest"), ("processed_per_s", "end")):
        values = frame[source].to_numpy(dtype=float)
        frame[column] = np.clip((values - values[base]) / elapsed, 0, None)
    return frame[TIMELINE_COLUMNS]


def timeline_plot_png(frame: pd.DataFrame, changes: Sequence[tuple[float, float, str]], title: str) -> bytes:
    """Rates, backlog and cores over time (three panels sharing the time axis).

    Args:
        frame: :func:`timeline_frame`.
        changes: ``(paused_at, first_batch_at, label)`` per reconfiguration (s since epoch): the downtime, shaded.
    """
    t0 = float(frame["at"].min()) if len(frame) else 0.0
    x = frame["at"] - t0
    fig, (rates, backlog, cores) = plt.subplots(
        3, 1, sharex=True, figsize=(9, 7), dpi=90, gridspec_kw={"height_ratios": [3, 2, 1.3]}
    )
    rates.plot(x, frame["offered_per_s"], label="offered", color="black", linewidth=1)
    rates.plot(x, frame["processed_per_s"], label="processed", color="#4c72b0", linewidth=1.2)
    rates.set_ylabel("events/s")
    rates.legend(loc="upper left", fontsize=8)
    backlog.fill_between(x, frame["backlog_events"].astype(float), color="#c44e52", alpha=0.5, step="post")
    backlog.set_ylabel("backlog (events)")
    cores.step(x, frame["cores"].astype(float), where="post", color="#55a868")
    cores.set_ylabel("cores")
    cores.set_xlabel("seconds since the first batch")
    for paused_at, resumed_at, label in changes:
        for ax in (rates, backlog, cores):
            ax.axvspan(paused_at - t0, max(resumed_at, paused_at + 0.5) - t0, color="#dd8452", alpha=0.25)
        rates.annotate(label, (paused_at - t0, rates.get_ylim()[1]), fontsize=7, va="top", rotation=90)
    rates.set_title(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
