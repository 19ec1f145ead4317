"""The health gate after a resume: a reconfiguration succeeds only over a stream proven to run again.

After the resume, the stream must show, within :data:`GATE_TIMEOUT_S` (or the observe step's timeout, if longer: a
catch-up batch after a pause on a loaded machine can take a while, and rolling back a stream that works would cost
more than waiting for it):

* no failure: its query is running (a query that failed, or stopped, fails the gate at once);
* at least :data:`HEALTHY_BATCHES` batches committed since the resume;
* its sources' position past where the pause left it, where the sources have positions.

A query that waits with no input offered (no batch running, no data available) passes as ``idle`` once
:data:`IDLE_PROOF_S` have gone by since the resume, or when the time is up: nothing was offered to prove it on, and
nothing failed. Anything else fails the gate, and the reconfiguration rolls back (``failed_after_resume``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import pandas as pd

from dagster_reconf.core.errors import summary_line
from dagster_reconf.core.reconfig.observe import Observation, committed_batches, observe_change
from dagster_reconf.core.store.metrics import MetricsStore

__all__ = ["HEALTHY_BATCHES", "ResumedHealth", "resumed_health", "watch_resumed"]

HEALTHY_BATCHES = 2
IDLE_PROOF_S = 5.0
GATE_TIMEOUT_S = 180.0
OBSERVE_POLL_S = 0.5
OBSERVED_TAIL_BYTES = 4 << 20  # the metrics store's tail read once; after it, only what came since
WAITING_FOR_DATA = "Waiting for data to arrive"


@dataclass(frozen=True)
class ResumedHealth:
    """What the gate found: ``healthy`` (pass), ``idle`` (pass: nothing offered yet), ``waiting`` (look again) or
    ``failed`` (with the ``problem`` in one line, and Spark's ``error`` where the query raised one)."""

    verdict: Literal["healthy", "idle", "waiting", "failed"]
    batches: int
    problem: str | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict in ("healthy", "idle")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resumed_health(
    status: dict[str, Any],
    batches: pd.DataFrame,
    *,
    paused_at: float,
    resumed_at: float,
    time_is_up: bool,
    now: float | None = None,
) -> ResumedHealth:
    """The gate's verdict from the stream's ``status`` and its committed ``batches``
    (:func:`~dagster_reconf.core.reconfig.observe.committed_batches`)."""
    state = status.get("state")
    after = batches[batches["committed_at"] >= resumed_at] if len(batches) else batches
    count = len(after)
    if state == "failed" or status.get("failure"):
        error = str(status.get("failure") or "").strip()
        first = summary_line(error) if error else "no message"
        return ResumedHealth("failed", count, f"the resumed query failed: {first}", error or None)
    if state not in ("running", "busy"):
        return ResumedHealth("failed", count, f"the resumed query is {state}, not running")
    if count >= HEALTHY_BATCHES:
        before = batches[batches["committed_at"] <= paused_at]
        moved = _moved(before["end"], after["end"])
        if moved is not False:
            return ResumedHealth("healthy", count)
        if time_is_up:
            return ResumedHealth(
                "failed",
                count,
                f"{count} batches since the resume, but the sources' position did not move past "
                f"{before['end'].max():g}, where the pause left them",
            )
        return ResumedHealth("waiting", count)
    idle = status.get("query_idle") or status.get("query_status") == WAITING_FOR_DATA
    if idle and (time_is_up or (now or time.time()) - resumed_at >= IDLE_PROOF_S):
        return ResumedHealth("idle", count)
    if not time_is_up:
        return ResumedHealth("waiting", count)
    return ResumedHealth(
        "failed", count, f"{count} batch(es) committed since the resume, {HEALTHY_BATCHES} needed within the timeout"
    )


def _moved(before: pd.Series, after: pd.Series) -> bool | None:
    """Whether the position went past the pause's (None: the sources have no positions to tell)."""
    before, after = before.dropna(), after.dropna()
    if before.empty or after.empty:
        return None
    return bool(after.max() > before.max())


def watch_resumed(
    status: Callable[[], dict[str, Any]],
    store: MetricsStore,
    *,
    paused_at: float,
    resumed_at: float,
    normal: float,
    timeout_s: float,
) -> tuple[Observation, ResumedHealth]:
    """Watch the resumed stream until it has passed the gate and caught up (or ``timeout_s`` is up), or failed the
    gate; how it went through the change (:func:`~dagster_reconf.core.reconfig.observe.observe_change`) and the
    verdict."""
    records, offset = store.tail(OBSERVED_TAIL_BYTES)
    started = time.monotonic()
    deadline, gate_deadline = started + timeout_s, started + max(timeout_s, GATE_TIMEOUT_S)
    while True:
        batches = committed_batches(records)
        observation = observe_change(batches, paused_at=paused_at, resumed_at=resumed_at, normal=normal)
        now = time.monotonic()
        health = resumed_health(
            status(), batches, paused_at=paused_at, resumed_at=resumed_at, time_is_up=now > gate_deadline
        )
        if health.verdict in ("failed", "idle") or (health.passed and (observation.caught_up or now > deadline)):
            return observation, health
        time.sleep(OBSERVE_POLL_S)
        new, offset = store.read(offset)
        records.extend(new)
