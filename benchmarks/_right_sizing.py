"""Right-sizing a stream under a steady load: the fewest cores that sustain it, and a policy's steps towards them.

Shared by ``benchmarks.convergence`` (bundled Nexmark queries, three policies) and ``benchmarks.own_stream`` (users'
streams, DS2). A :class:`Workload` says how to build the stream's spec at some cores and trigger interval and how its
load is offered; everything else is the same for any stream:

* :func:`minimum_configuration`: a binary search over the cores, a fresh stream per probe (none inherits an earlier
  probe's backlog), each judged by :func:`sustains` from a full settled window on.
* :func:`run_policy`: the stream started on some cores; the policy decides every second exactly as the scaling
  sensor does (the configuration window over the metrics store, traces from the event logs), each plan is applied by
  restarting the stream with its knobs, until the stream is right-sized (it keeps up, the policy holds, and it runs
  on at most :data:`RIGHT_SIZE_SLACK` x the minimum), or out of steps or time.
* :func:`score`: DS2's prediction error after a step, from the very profile the plan was made from.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager

import numpy as np
import pandas as pd

from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide
from dagster_reconf.core.scaling.policies import POLICIES
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.profile import StreamProfile
from dagster_reconf.core.scaling.scaling_plan import Knobs
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import MetricsStore, record_row
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.traces.store import TraceStore

TRIGGER_S = 2.0
LONGER_TRIGGER_S = 4.0  # where a probe overruns 2 s with no backlog: the same cores, the fixed costs halved per event
MAX_STEPS = 3
RIGHT_SIZE_SLACK = 1.25  # a converged run ends within this factor of the minimum cores
# A new SparkContext starts its Python workers in its first batches: those of the first 10 s are left out.
POLICY = PolicyConfig(
    window_batches=3,
    warmup_batches=1,
    stabilization_s=10,
    scale_down_delay_s=0,
    allow_state_migration=False,
    max_cores=12,
    utilization_low=0.4,
)


@dataclass(frozen=True)
class Workload:
    """A stream and the load offered to it.

    ``spec_for(data, cores, trigger_s)`` builds the stream's spec for one run whose inputs and outputs live under
    ``data`` (a fresh folder per run); ``feed(data)`` offers the load while its block runs (a file or topic writer;
    a rate source offers its own: ``None``). ``rate`` is the events/s offered."""

    name: str
    rate: float
    spec_for: Callable[[Path, int, float], StreamSpec]
    feed: Callable[[Path], ContextManager[Any]] | None = None

    @contextlib.contextmanager
    def running(self, data: Path, cores: int, trigger_s: float, drain_s: float = 0.0) -> Iterator[StreamRuntime]:
        """The stream started on ``cores`` under its load, stopped when the block ends. With ``drain_s``, the load
        stops first and the stream runs on (at most ``drain_s``) until it has read everything offered: an oracle
        over the whole input needs that."""
        spec = self.spec_for(data, cores, trigger_s)
        runtime = StreamRuntime(spec, StreamPaths(data / "home", spec.name))
        try:
            with self.feed(data) if self.feed is not None else contextlib.nullcontext():
                runtime.start()
                yield runtime
            if drain_s and self.feed is not None:
                drained(runtime, time.time(), drain_s)
        finally:
            runtime.shutdown(timeout_s=60)


def drained(runtime: StreamRuntime, since: float, timeout_s: float) -> bool:
    """Wait until a batch that started after ``since`` left no backlog (at most ``timeout_s``)."""
    store, deadline = MetricsStore(runtime.paths.metrics), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        last = store.last_progress()
        row = record_row(last) if last else {}
        started = pd.Timestamp(row["timestamp"]).timestamp() if row.get("timestamp") is not None else 0.0
        if started > since and row.get("backlog_events") == 0:
            return True
    print(f"    {runtime.spec.name}: still behind {timeout_s:g} s after its load stopped", flush=True)
    return False


@dataclass(frozen=True)
class Minimum:
    """The smallest configuration that sustains a workload's rate: its cores, at ``trigger_s``."""

    cores: int
    trigger_s: float = TRIGGER_S

    @classmethod
    def parse(cls, text: str) -> "Minimum":
        """``CORES`` or ``CORES@SECONDS`` (``--minimum q5=4@4``)."""
        cores, _, trigger = text.partition("@")
        try:
            minimum = cls(int(cores), float(trigger) if trigger else TRIGGER_S)
        except ValueError:
            minimum = None
        if minimum is None or minimum.cores < 1 or not minimum.trigger_s > 0:
            raise SystemExit(
                f"--minimum: {text!r} is not CORES or CORES@TRIGGER_SECONDS (at least 1 core, a positive "
                "interval), e.g. 4 or 4@4"
            )
        return minimum

    def __str__(self) -> str:
        return f"{self.cores} cores at {self.trigger_s:g} s"


@dataclass
class Run:
    """One stream under one policy, from its first configuration until it converged or ran out of steps or time."""

    case: str
    policy: str
    steps: int = 0
    converged: bool = False
    oscillations: int = 0
    cores: list[int] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    band_errors: list[float] = field(default_factory=list)  # how far outside the predicted band (0 inside it)
    seconds: float = 0.0
    core_seconds: float = 0.0  # cores held x wall-clock time, until converged or the run ended
    minimum: int = 1  # the fewest cores that sustain the rate (minimum_configuration)
    kinds: list[str] = field(default_factory=list)  # each applied step's kind (scale_up, scale_down, ...)
    final_spec: StreamSpec | None = None
    home: Path | None = None  # the run's runtime home (its metrics, checkpoint and event logs)


def sustains(runtime: StreamRuntime, rate: float, timeout_s: float = 90.0, utilization: float = 1.0) -> tuple[str, str]:
    """Whether the running configuration keeps up with ``rate``, judged from a full settled window on, and what it
    showed: ``"sustains"``, ``"overruns"`` (no backlog, but only with batches over ``utilization`` of the interval:
    1, back to back; the policy's target, without the headroom it keeps) or ``"behind"``.

    It keeps up where its backlog is gone (``Signal.has_backlog``) with batches that fit the interval. A backlog
    that the window shows shrinking is watched for up to the policy's catch-up time and counts only where it is
    really gone by then: near the limit a window's trend is noise. A backlog that shrinks more slowly (batches run
    flat out, over the interval) is a configuration at its limit, not one that sustains the rate at its trigger
    interval."""
    window, offset, started = ConfigurationWindow(), 0, time.monotonic()
    store, interval = MetricsStore(runtime.paths.metrics), runtime.spec.trigger_interval_s
    probe = POLICIES["ds2"](POLICY)  # only for its observation of the window: no traces, no plan
    judged_at: float | None = None  # when a full settled window first showed the backlog shrinking in time
    while time.monotonic() - started < timeout_s + (POLICY.catch_up_s if judged_at else 0.0):
        time.sleep(1.0)
        records, offset = store.read(offset)
        window.update(records)
        obs = decide(probe, window, time.time(), plan=False).signal
        if (
            obs.batches < POLICY.window_batches
            or not window.started_at
            or time.time() - window.started_at < POLICY.stabilization_s
        ):
            continue
        shown = f"utilization {obs.utilization:.2f}, backlog {obs.backlog:,.0f} ({obs.backlog_growth:+.0f}/s)"
        if not obs.has_backlog(interval) and obs.backlog_growth <= POLICY.backlog_growth_tolerance * rate:
            cleared = f", cleared {time.monotonic() - judged_at:.0f} s after it shrank" if judged_at else ""
            return ("sustains" if obs.utilization <= utilization else "overruns"), shown + cleared
        # Batches run back to back while a backlog clears.
        clearing = obs.backlog_growth < 0 and obs.backlog / -obs.backlog_growth <= POLICY.catch_up_s
        if judged_at is None and clearing:
            judged_at = time.monotonic()
        elif judged_at is None or time.monotonic() - judged_at > POLICY.catch_up_s:
            return "behind", shown + (f", not cleared {POLICY.catch_up_s:g} s after it shrank" if judged_at else "")
    return "behind", f"no full window in {timeout_s:g} s"


def probe(workload: Workload, home: Path, cores: int, trigger_s: float, utilization: float = 1.0) -> str:
    """Run ``cores`` at ``trigger_s`` on a fresh stream under the workload's load; say how it keeps up."""
    with workload.running(home / f"{workload.name}-minimum-{cores}-{trigger_s:g}s", cores, trigger_s) as runtime:
        verdict, shown = sustains(runtime, workload.rate, utilization=utilization)
    print(
        f"    {workload.name}: minimum sweep: {cores} cores at {trigger_s:g} s: {verdict} at {workload.rate:g} "
        f"events/s ({shown})",
        flush=True,
    )
    return verdict


def minimum_configuration(
    workload: Workload,
    home: Path,
    upper: int,
    longer_trigger: bool = True,
    utilization: float = 1.0,
    retry: tuple[str, ...] = ("overruns",),
) -> Minimum:
    """The fewest cores that sustain the workload's rate with batches within ``utilization`` of the interval, and
    the trigger interval they need: a binary search over 1..``upper`` at TRIGGER_S (more cores never hurt here until
    per-task costs dominate, far above the minimum); a count whose verdict there is in ``retry`` (by default one that
    keeps pace only by overrunning) is judged again at LONGER_TRIGGER_S (``longer_trigger``): where a batch's tasks
    are bounded by its input (a file each), only a longer interval gives more cores work. ``upper`` is not probed:
    where even it does not sustain the rate, the answer is ``upper``."""
    lo, hi, trigger = POLICY.min_cores, upper, {}
    while lo < hi:
        mid = (lo + hi) // 2
        verdict = probe(workload, home, mid, TRIGGER_S, utilization)
        if verdict in retry and longer_trigger:
            verdict = probe(workload, home, mid, LONGER_TRIGGER_S, utilization)
            if verdict == "sustains":
                trigger[mid] = LONGER_TRIGGER_S
        lo, hi = (lo, mid) if verdict == "sustains" else (mid + 1, hi)
    return Minimum(lo, trigger.get(lo, TRIGGER_S))


def band_error(measured_ms: float, low_ms: float, high_ms: float) -> float:
    """How far ``measured_ms`` lies outside the predicted band ``[low_ms, high_ms]``, relative to its nearest end."""
    nearest = min(max(measured_ms, low_ms), high_ms)
    return abs(measured_ms / nearest - 1.0)


def score(profile: StreamProfile, knobs: Knobs, batches: pd.DataFrame) -> tuple[float, float, str]:
    """DS2's prediction error over ``batches`` run under ``knobs``, from the ``profile`` the plan was made from: each
    batch's duration against the prediction for its own events (a window after a step mixes catch-up batches at the
    cap with steady ones), as ``|median(measured / predicted) - 1|`` (= |capacity predicted / measured - 1|); how far
    outside the predicted band (median over the batches, 0 inside); and the batch of median events, in words."""
    events = batches["events"].to_numpy(dtype=float)
    measured = batches["batch_duration_ms"].to_numpy(dtype=float)
    predicted = np.array([profile.batch_ms_for(e, knobs) for e in events])
    bands = [profile.batch_ms_band(e, knobs) for e in events]  # what one configuration cannot tell (the model)
    error = abs(float(np.median(measured / predicted)) - 1.0)
    outside = float(np.median([band_error(m, low, high) for m, (low, high) in zip(measured, bands, strict=True)]))
    i = int(np.argsort(events)[len(events) // 2])
    low, high = bands[i]
    band = f" (band {low:.0f}-{high:.0f} ms)" if low < high else ""
    return (
        error,
        outside,
        (
            f"{len(events)} batches; {events[i]:.0f} events predicted {predicted[i]:.0f} ms{band}, "
            f"measured {measured[i]:.0f} ms"
        ),
    )


def right_sized_bound(minimum: int) -> int:
    """The most cores a right-sized run may end on: RIGHT_SIZE_SLACK x the minimum, rounded up."""
    return math.ceil(RIGHT_SIZE_SLACK * minimum)


def run_policy(
    workload: Workload,
    case: str,
    cores: int,
    policy_name: str,
    home: Path,
    timeout_s: float,
    minimum: Minimum,
    trigger_s: float = TRIGGER_S,
    load_phase: Callable[[float], int] = lambda elapsed_s: 0,
    final_phase: int = 0,
    drain_s: float = 0.0,
) -> Run:
    """One stream, one policy: decide every second, apply plans, stop when converged (right-sized: within
    RIGHT_SIZE_SLACK of the minimum's cores) or out of steps or time.

    ``load_phase(seconds since the start)`` numbers the load's phases where it steps (a reversal the load asked for is
    no oscillation); a run converges only in ``final_phase``, on a window offered at most 1.5x the workload's rate.
    ``drain_s``: at the end, let the stream read what its load offered (:meth:`Workload.running`)."""
    result = Run(case, policy_name, cores=[cores], minimum=minimum.cores, home=home / f"{case}-{policy_name}")
    policy = POLICIES[policy_name](POLICY)
    said_oversized = False
    window, offset, last_direction, last_phase = ConfigurationWindow(), 0, None, 0
    pending: tuple[StreamProfile, Knobs] | None = None  # DS2's profile before a step, to score its prediction
    started = time.monotonic()
    held_since = started
    label = f"{case}/{policy_name}"

    def hold_until(now: float) -> None:  # the cores held since the last step count towards the run's core-seconds
        nonlocal held_since
        result.core_seconds += cores * (now - held_since)
        held_since = now

    with workload.running(result.home, cores, trigger_s, drain_s) as runtime:
        store, traces = MetricsStore(runtime.paths.metrics), TraceStore(runtime.paths.traces)

        def activities(lo: float, hi: float):
            traces.ingest(runtime.paths.event_log)
            return traces.activities(lo, hi)

        try:
            while time.monotonic() - started < timeout_s:
                time.sleep(1.0)
                records, offset = store.read(offset)
                window.update(records)
                decision = decide(policy, window, time.time(), activities)
                obs = decision.signal
                if obs.batches < POLICY.window_batches:
                    continue
                if pending is not None:
                    before, knobs = pending
                    batches = (
                        window.settled(POLICY.stabilization_s).sort_values("batch_id").iloc[POLICY.warmup_batches :]
                    )
                    error, outside, shown = score(before, knobs, batches)
                    result.errors.append(error)
                    result.band_errors.append(outside)
                    print(
                        f"    {label}: at {knobs.cores} cores, {knobs.trigger_interval_s:g} s: {shown} "
                        f"(error {error:.0%}, outside the band {outside:.0%})",
                        flush=True,
                    )
                    pending = None
                keeps_up = obs.backlog_growth <= POLICY.backlog_growth_tolerance * workload.rate
                phase = load_phase(time.monotonic() - started)
                final_load = phase == final_phase and obs.source_rate < 1.5 * workload.rate
                if decision.action == "hold" and keeps_up and final_load:
                    if cores <= right_sized_bound(minimum.cores):
                        result.converged = True
                        print(f"    {label}: holds at {decision.step.describe()}: {decision.reason[:400]}", flush=True)
                        break
                    if not said_oversized:
                        said_oversized = True
                        print(
                            f"    {label}: holds on {cores} cores, more than {right_sized_bound(minimum.cores)} "
                            f"({RIGHT_SIZE_SLACK:g}x the minimum {minimum.cores}): {decision.reason[:400]}",
                            flush=True,
                        )
                if not decision.requests_run:
                    print(f"    {label}: {decision.reason[:120]}", flush=True)
                    continue
                if result.steps == MAX_STEPS:
                    break
                plan = decision.plan
                if decision.action in ("scale_up", "scale_down"):  # an interval change alone has no direction
                    if last_direction is not None and decision.action != last_direction and phase == last_phase:
                        result.oscillations += 1  # a reversal the load did not ask for
                    last_direction, last_phase = decision.action, phase
                # Scored against the very profile the plan was made from (settled batches, the machine's CPUs).
                pending = (
                    (decision.profile, plan.target) if policy_name == "ds2" and decision.profile is not None else None
                )
                print(
                    f"  {label}: step {result.steps + 1}: {plan.step.describe()} ({decision.reason[:400]})", flush=True
                )
                hold_until(time.monotonic())
                runtime.restart(plan.target.changes_for(runtime.spec))
                cores = plan.target.cores
                result.steps += 1
                result.cores.append(plan.target.cores)
                result.kinds.append(plan.step.kind)
        finally:
            hold_until(time.monotonic())
            result.final_spec = runtime.spec
    result.seconds = round(time.monotonic() - started, 1)
    if not result.converged:
        result.steps = MAX_STEPS + 1
    return result
