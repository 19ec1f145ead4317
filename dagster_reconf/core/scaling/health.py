"""A stream's health in one record: what its page shows and what its three checks judge.

The streams sensor reads each stream's new metrics records every tick and asks the policy which way it points
(:func:`~dagster_reconf.core.scaling.evidence.decide`, no traces read). :func:`assess` turns that tick into a
:class:`StreamHealth`: the driver's state, the lag in events and in seconds, the rates, the knobs in force, the last
batch. Three verdicts follow from it, each with the reason a person reads:

* ``driver_alive``: a driver runs the stream (or it is attached and its application's query has not ended). A driver
  that vanished while it ran fails it; a stream stopped on purpose fails it too, as a warning.
* ``query_healthy``: the query has not failed (Spark's own message where it has).
* ``lag_within_band``: the backlog is not growing past the policy's tolerance, the stream can still clear it (not
  ``cannot_keep_up``), and it is no older than the policy's catch-up time. While the backlog is unknown, or no batch
  has been seen, it fails as a warning that says so: an unknown lag is never called in band.

The lag in seconds is the backlog over the offered rate: how long the newest unread event has waited at that rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from dagster_reconf.core.scaling.evidence import ConfigurationWindow
from dagster_reconf.core.scaling.policy import Decision
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.scaling_plan import Knobs
from dagster_reconf.core.spec import StreamSpec

__all__ = ["StreamHealth", "Verdict", "assess", "epoch_seconds"]

StreamState = Literal["running", "paused", "attached", "ended", "query failed", "died", "stopped"]
DriverState = Literal["running", "attached", "died", "not running"]


@dataclass(frozen=True)
class Verdict:
    """One check's outcome: passed, whether a failure is only a warning, and why."""

    passed: bool
    reason: str
    warning: bool = False


@dataclass(frozen=True)
class StreamHealth:
    """One stream at one tick (see module docstring). Figures are None where they are not known."""

    stream: str
    state: StreamState
    driver_alive: Verdict
    query_healthy: Verdict
    lag_within_band: Verdict
    lag_events: float | None = None
    lag_s: float | None = None
    offered_rate: float | None = None  # events/s
    processed_rate: float | None = None  # events/s
    utilization: float | None = None  # median batch duration over the trigger interval
    cores: int | None = None
    state_partitions: int | None = None
    trigger: str | None = None
    last_batch_id: int | None = None
    last_batch_at: float | None = None  # epoch seconds of the last batch's start
    spark_ui: str | None = None
    delivery: str | None = None
    decision: str | None = None
    reason: str | None = None

    def verdicts(self) -> dict[str, Verdict]:
        """The three checks' verdicts, by name."""
        return {
            "driver_alive": self.driver_alive,
            "query_healthy": self.query_healthy,
            "lag_within_band": self.lag_within_band,
        }


def assess(
    stream: str,
    driver: DriverState,
    window: ConfigurationWindow | None,
    decision: Decision | None,
    config: PolicyConfig,
    *,
    query_error: str | None = None,
    spark_ui: str | None = None,
    delivery: str | None = None,
) -> StreamHealth:
    """The health of ``stream`` from what its tick read.

    Args:
        driver: the supervisor's word on its driver.
        window: its configuration window after this tick's records (None: no driver, nothing read).
        decision: the policy's direction for that window (None: not asked).
        config: the policy's settings: its band (growth tolerance, catch-up time).
        query_error: a failure of its query seen in this tick's records.
        spark_ui: its driver's Spark UI.
        delivery: its delivery guarantee, as ``reconf stream status`` states it.
    """
    failed = query_error or (window.end_exception if window is not None and window.terminated else None)
    state = _state(driver, window, failed)
    alive = _driver_verdict(driver, state)
    healthy = Verdict(False, f"the query failed: {failed}") if failed else Verdict(True, "no query failure seen")
    figures: dict[str, Any] = {}
    knobs = decision.current if decision is not None else None
    if knobs is None and window is not None and window.spec is not None:
        knobs = Knobs.of(StreamSpec.parse(window.spec))
    if knobs is not None:
        figures.update(
            cores=knobs.cores,
            state_partitions=knobs.state_partitions,
            trigger=f"processingTime {knobs.trigger_interval_s:g} s",
        )
    if window is not None and window.rows:
        last = window.rows[-1]
        figures.update(last_batch_id=int(last["batch_id"]), last_batch_at=epoch_seconds(last.get("timestamp")))
    unread = "no driver reads the stream" if window is None else "no batch of the stream has been read yet"
    if decision is not None and window is not None:
        unread = decision.reason  # stabilizing after a restart, say
    lag = Verdict(False, f"not judged: {unread}", warning=True)
    if decision is not None and decision.signal.batches > 0:
        signal = decision.signal
        known = signal.backlog_unknown is None
        lag_s = signal.backlog / signal.source_rate if known and signal.source_rate > 0 else None
        figures.update(
            lag_events=signal.backlog if known else None,
            lag_s=lag_s,
            offered_rate=signal.source_rate,
            processed_rate=signal.processed_rate,
            utilization=signal.utilization,
            decision=decision.action,
            reason=decision.reason,
        )
        lag = (
            _lag_verdict(decision, config, lag_s)
            if known
            else Verdict(False, f"not judged: the backlog is unknown ({signal.backlog_unknown})", warning=True)
        )
    return StreamHealth(stream, state, alive, healthy, lag, spark_ui=spark_ui, delivery=delivery, **figures)


def _state(driver: DriverState, window: ConfigurationWindow | None, failed: str | None) -> StreamState:
    if driver == "died":
        return "died"
    if driver == "not running":
        return "stopped"
    if failed:
        return "query failed"
    if driver == "attached":
        return "ended" if window is not None and window.terminated else "attached"
    return "paused" if window is not None and window.terminated else "running"  # a driver without its query


def _driver_verdict(driver: DriverState, state: StreamState) -> Verdict:
    if driver == "running":
        return Verdict(True, "its driver runs")
    if driver == "attached":
        if state == "ended":
            return Verdict(False, "attached: its application's query ended", warning=True)
        return Verdict(True, "attached: its application's event log grows")
    if driver == "died":
        return Verdict(False, "its driver died while the stream ran (see the audit ledger's incident)")
    return Verdict(False, "no driver: the stream was stopped (reconf stream start resumes it)", warning=True)


def _lag_verdict(decision: Decision, config: PolicyConfig, lag_s: float | None) -> Verdict:
    signal = decision.signal
    if decision.action == "cannot_keep_up":
        return Verdict(False, decision.reason)
    growing = signal.backlog_growth > config.backlog_growth_tolerance * max(signal.source_rate, 1e-9)
    behind = signal.backlog > 0 and growing
    if behind:
        return Verdict(
            False,
            f"falling behind: the backlog ({signal.backlog:,.0f} events) grows {signal.backlog_growth:,.1f} events/s, "
            f"past the band's {config.backlog_growth_tolerance:.0%} of the offered {signal.source_rate:,.1f} events/s",
        )
    if lag_s is not None and lag_s > config.catch_up_s:
        return Verdict(
            False, f"{lag_s:,.1f} s behind, past the policy's catch-up time of {config.catch_up_s:g} s", warning=True
        )
    shown = "" if lag_s is None else f", {lag_s:,.1f} s"
    return Verdict(True, f"lag {signal.backlog:,.0f} events{shown}: within the band")


def epoch_seconds(value: Any) -> float | None:
    """A progress row's time (a Timestamp, an ISO string or epoch seconds) as epoch seconds."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return None if math.isnan(value) else float(value)
    import pandas as pd

    stamp = pd.Timestamp(value)
    if stamp is pd.NaT:
        return None
    return (stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp).timestamp()
