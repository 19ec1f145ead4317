"""The signal a scaling decision reads: what a configuration's recent batches say about load, backlog and pace.

The source's offered position is a batch's end plus its backlog (in events, see
:mod:`dagster_reconf.core.progress.source_kinds`); rates come from that position over time, so they hold for any
source whose backlog can be read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from dagster_reconf.core.scaling.admission import Admission, binding_cap

__all__ = ["RECENT_BATCHES", "Signal", "observe", "offered_rates"]


@dataclass(frozen=True)
class Signal:
    """What a configuration's recent batches say (from the metrics store)."""

    batches: int  # in the window, after warm-up
    config_age_s: float  # since the configuration started
    source_rate: float  # events/s the source offered, over the newest batches (a load step shows at once)
    processed_rate: float  # events/s the stream consumed
    backlog: float  # events behind at the last batch
    backlog_growth: float  # events/s, fitted over the window
    utilization: float  # median batch duration over the trigger interval (1 when back to back)
    batch_ms: float  # median batch duration
    backlog_unknown: str | None = None  # why the source's backlog cannot be read (None: it can)
    peak_rate: float = 0.0  # the highest offered rate over spans like source_rate's ending in the last peak_span_s
    peak_span_s: float = 0.0  # the scale-down delay, or the newest span where that is longer
    source_partitions_seen: int | None = None  # Kafka partitions the source saw at the last batch (None: not Kafka)
    admission: Admission | None = None  # a cap per batch that binds (None: none does)

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if isinstance(v, (int, float))}

    def has_backlog(self, trigger_interval_s: float) -> bool:
        """More behind than one interval's arrivals: less is what a batch leaves behind at any steady rate."""
        return self.backlog > self.source_rate * trigger_interval_s


def observe(
    progress: pd.DataFrame,
    trigger_interval_s: float,
    config_age_s: float,
    warmup_batches: int = 2,
    peak_span_s: float = 0.0,
) -> Signal:
    """Summarize one configuration's progress rows (``metrics.progress_frame``), warm-up left out.

    The offered rate is read over the newest batches, the backlog's growth fitted over the whole window.
    ``peak_span_s`` (the policy's scale-down delay): also read the highest rate over such spans ending
    within it, or within the newest span where that is longer, which a scale-down must be planned for
    too (:attr:`Signal.peak_rate`): a load that moved inside the newest span shows there.

    The source's offered position is the batch's end plus its backlog (in events, see
    :mod:`dagster_reconf.core.progress.source_kinds`); where offsets do not count events, the end is the
    events consumed since the window began. Each position is placed at the time it was read (``offered_after_s``
    past the batch's start: a file source's listing comes after its batch). Batches whose source backlog is unknown are
    left out, and said so in ``backlog_unknown``.
    """
    rows = progress.sort_values("batch_id").iloc[warmup_batches:]
    seen = rows["kafka_partitions"].dropna() if "kafka_partitions" in rows else pd.Series(dtype=float)
    partitions = int(seen.iloc[-1]) if len(seen) else None
    unknown = rows["backlog_events"].isna() if "backlog_events" in rows else pd.Series(True, index=rows.index)
    reason = None
    if len(rows) and unknown.all():
        reasons = rows["backlog_unknown"].dropna() if "backlog_unknown" in rows else pd.Series(dtype=object)
        reason = str(reasons.iloc[-1]) if len(reasons) else "the source reports no backlog"
    events = rows["events"].astype(float) if "events" in rows else pd.Series(0.0, index=rows.index)
    end = (
        rows["end_offset"].astype(float)
        if "end_offset" in rows and rows["end_offset"].notna().all()
        else events.cumsum()
    )
    offered = (end + rows["backlog_events"].astype(float))[~unknown] if len(rows) else end
    rows, events = rows[~unknown], events[~unknown]
    if len(rows) < 2:
        return Signal(len(rows), config_age_s, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, reason, source_partitions_seen=partitions)
    t = (rows["timestamp"] - rows["timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    span = float(t[-1]) or 1e-9
    read_after = rows["offered_after_s"] if "offered_after_s" in rows else pd.Series(0.0, index=rows.index)
    t_offered = t + read_after.astype(float).fillna(0.0).to_numpy()  # when each position was read
    latest = offered.to_numpy(dtype=float)
    backlog = rows["backlog_events"].astype(float).to_numpy()
    batch_ms = float(rows["batch_duration_ms"].median())
    rates = offered_rates(t_offered, latest, peak_span_s)
    declared = rows["declared_rate"].dropna() if "declared_rate" in rows else pd.Series(dtype=float)
    if len(declared) == len(rows):  # every batch's sources say what they offer (a rate source): exact
        recent = declared.iloc[-RECENT_BATCHES:]
        rates = {**rates, "source_rate": float(declared.iloc[-1]), "peak_rate": float(recent.max())}
    return Signal(
        batches=len(rows),
        config_age_s=config_age_s,
        processed_rate=float(events.iloc[1:].sum()) / span,
        backlog=float(backlog[-1]),
        backlog_growth=float(np.polyfit(t_offered, backlog, 1)[0]) if np.ptp(t_offered) > 0 else 0.0,
        utilization=batch_ms / (trigger_interval_s * 1000.0) if trigger_interval_s > 0 else 1.0,
        batch_ms=batch_ms,
        **rates,
        source_partitions_seen=partitions,
        admission=binding_cap(rows, trigger_interval_s),
    )


RECENT_BATCHES = 4  # the offered rate is read over the newest batches (three intervals)


def offered_rates(t: np.ndarray, offered: np.ndarray, peak_span_s: float) -> dict[str, float]:
    """Events/s offered over spans of :data:`RECENT_BATCHES` batches: the newest span's (``source_rate``), and the
    highest of those ending within the last ``peak_span_s``, or within the newest span where that is longer
    (``peak_rate``, with ``peak_span_s``). Where the load steps inside the window (which spans the configuration's
    life), its average would plan for a rate that no longer holds (and a second step); a scale-down must also be
    planned for what the source offered at its busiest while it waited."""
    first = np.maximum(np.arange(len(t)) - (RECENT_BATCHES - 1), 0)
    elapsed = t - t[first]
    rates = np.divide(offered - offered[first], elapsed, out=np.zeros(len(t)), where=elapsed > 0)
    span_s = max(peak_span_s, float(elapsed[-1]))
    spans = (elapsed > 0) & (t >= t[-1] - span_s)
    return {
        "source_rate": float(rates[-1]),
        "peak_rate": float(rates[spans].max()) if spans.any() else 0.0,
        "peak_span_s": span_s,
    }
