"""A cap on what a source admits per batch, read from the batches: the user's own ``maxFilesPerTrigger``,
``maxOffsetsPerTrigger`` or a Python source's ``ReadMaxRows``, or the ``max_per_trigger`` knob.

A cap binds where the batches are full (they read the same count, the most any of them read) while more waits behind
each than one batch takes, and they end with time to spare in the interval: more work per batch would fit, so the cap,
not the cores, holds the stream back (full batches that fill the interval are the cores' limit, whatever the cap; a
larger cap would only lengthen them). Then the source admits at most that count per trigger: its admitted
rate is the count over the interval (or over the batch, where a batch outlasts it). More cores do not raise it, and a
longer trigger lowers it; only a larger cap does. DS2 counts it as the source's capacity: where a knob maps onto the
cap it plans the cap, and where none does the decision names the option, what it admits now and the value that would
sustain the rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

__all__ = ["Admission", "CapVerdict", "binding_cap", "judge_cap"]

FULL_SHARE = 0.95  # a batch within this share of the largest is full
BINDING_SHARE = 0.8  # of the window's batches, at least this many are full with a batch's worth or more behind
SPARE_SHARE = 0.9  # full batches that take less of the interval than this end with time to spare
MIN_BATCHES = 3


@dataclass(frozen=True)
class Admission:
    """What a binding cap admits: events per batch, and the same in the source's own unit where it is known."""

    events_per_batch: float
    units_per_batch: float | None  # files, offsets or rows a batch reads now (None: not known)
    option: str | None  # the option that caps it (None: the source's kind has none known)

    def rate(self, interval_s: float, batch_s: float = 0.0) -> float:
        """Events/s admitted at ``interval_s`` (a batch that outlasts the interval starts the next one late)."""
        return self.events_per_batch / max(interval_s, batch_s, 1e-9)

    def units_for(self, rate: float, interval_s: float) -> int | None:
        """The cap, in the source's unit, that admits ``rate`` events/s at ``interval_s`` (None: unit unknown)."""
        if not self.units_per_batch:
            return None
        events_per_unit = self.events_per_batch / self.units_per_batch
        return max(1, math.ceil(rate * interval_s / events_per_unit))

    def describe(self) -> str:
        units = "" if self.units_per_batch is None else f" ({self.units_per_batch:g} of its unit)"
        return f"{self.option or 'its read limit'} admits {self.events_per_batch:,.0f} events a batch{units}"


def binding_cap(rows: pd.DataFrame, interval_s: float) -> Admission | None:
    """The cap that binds over the window's batches (progress rows, warm-up left out) at the trigger interval
    ``interval_s``, or None where none does. Only
    a source whose kind caps batches by an option known here (files, Kafka, Python sources) is read: a fixed count
    from a source of unknown kind could be its own pace, and the decision could not name what to raise."""
    if len(rows) < MIN_BATCHES or "events" not in rows or "backlog_events" not in rows or "cap_option" not in rows:
        return None
    if rows["cap_option"].isna().any():
        return None
    events = rows["events"].astype(float)
    backlog = rows["backlog_events"].astype(float)
    largest = float(events.max())
    if largest <= 0:
        return None
    full = (events >= FULL_SHARE * largest) & (backlog >= events)
    if full.mean() < BINDING_SHARE or interval_s <= 0:
        return None
    spare = float(rows["batch_duration_ms"].astype(float)[full].median()) < SPARE_SHARE * interval_s * 1000.0
    if not spare:  # the full batches fill the interval: the cores are the limit
        return None
    units = rows["batch_units"].astype(float)[full] if "batch_units" in rows else pd.Series(dtype=float)
    options = rows["cap_option"]
    return Admission(
        events_per_batch=float(events[full].median()),
        units_per_batch=float(units.median()) if units.notna().all() and len(units) else None,
        option=str(options.iloc[-1]),
    )


@dataclass(frozen=True)
class CapVerdict:
    """What a binding cap means for a stream that falls behind.

    Attributes:
        admitted: events/s the cap admits now.
        cap: the ``max_per_trigger`` knob's value that admits what is wanted, where the knob is the cap (None: no knob
            maps onto it, and only the user can raise it).
        keeps_up: the cap admits more than is offered (a backlog clears, if slowly); False: it cannot clear.
        reason: what the cap admits and the value that would sustain the rate, for the decision.
    """

    admitted: float
    cap: int | None
    keeps_up: bool
    reason: str


def judge_cap(
    admission: Admission,
    *,
    knob: int | None,
    interval_s: float,
    batch_s: float,
    offered: float,
    wanted: float,
    tolerance: float = 0.05,
) -> CapVerdict | None:
    """The verdict on ``admission`` for a stream offered ``offered`` events/s that wants ``wanted`` (offered plus
    catch-up), at ``interval_s``; None where the cap admits what is wanted (it is not what holds the stream back).
    ``knob``: the ``max_per_trigger`` knob's value where it maps onto this cap."""
    admitted = admission.rate(interval_s, batch_s)
    if admitted >= wanted:
        return None
    keeps_up = admitted > offered * (1.0 + tolerance)
    catch_up = "" if wanted <= offered else f" plus {wanted - offered:,.0f} to catch up"
    now = (
        f"{admission.option or 'the source read limit'} admits {admission.events_per_batch:,.0f} events a batch"
        f"{_in_units(admission.units_per_batch, admission.option)}: {admitted:,.0f} events/s at {interval_s:g} s, "
        f"under the {offered:,.0f} offered{catch_up}"
    )
    if knob is not None:
        per_unit = admission.events_per_batch / knob
        cap = max(knob + 1, math.ceil(wanted * interval_s / per_unit))
        return CapVerdict(admitted, cap, keeps_up, f"{now}; the max_per_trigger knob is its cap: {knob} -> {cap}")
    needed = admission.units_for(wanted, interval_s)
    value = f"{needed:,}" if needed is not None else f"{wanted / admitted:.1f}x what it is"
    return CapVerdict(
        admitted,
        None,
        keeps_up,
        f"{now}, whatever the cores{'' if keeps_up else ': the backlog cannot clear'}; it is set in the definition's "
        f"code, which the control plane does not change: raise it to {value} (it sustains {wanted:,.0f} events/s at "
        f"{interval_s:g} s), or map the max_per_trigger knob onto it (knob_options) so that plans set it",
    )


def _in_units(units: float | None, option: str | None) -> str:
    if units is None:
        return ""
    unit = {"maxFilesPerTrigger": "files", "maxOffsetsPerTrigger": "offsets"}.get(option or "", "rows")
    return f" ({units:,.0f} {unit})"
