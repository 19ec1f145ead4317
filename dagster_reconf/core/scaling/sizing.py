"""The cores and trigger interval that sustain a rate on a stream's profile, and why a configuration falls short.

The search of :func:`cores_and_interval` is DS2's micro-batch step (see :mod:`dagster_reconf.core.scaling.model`):
the fewest cores whose capacity covers the rate at the target utilization, at the shortest interval where their fixed
costs keep within their share of the batch (Drizzle). :func:`shortfall` names the test a configuration fails, by the
same tests in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_reconf.core.scaling.profile import StreamProfile
    from dagster_reconf.core.scaling.scaling_plan import Knobs

__all__ = ["Limits", "cores_and_interval", "interval_for", "shortfall"]


@dataclass(frozen=True)
class Limits:
    """Bounds and targets the model plans within."""

    utilization: float = 0.7  # target share of the trigger interval a batch takes
    utilization_floor: float = 0.0  # below this share at the steady rate a plan is over-provisioned (catch-up cut back)
    max_coordination: float = 0.25  # largest share of the batch budget (utilization x interval) fixed costs take
    catch_up_s: float = 60.0  # clear the backlog within this long
    min_cores: int = 1
    max_cores: int = 64
    min_state_partitions: int = 1
    max_state_partitions: int = 512
    max_trigger_interval_s: float = 30.0
    plan_trigger: bool = True  # may the plan change the trigger interval? (not where the definition sets it)
    allow_state_migration: bool = True  # may the plan change state partitions?
    source_partition_floor: int | None = None  # partitions the source has of its own (a Kafka topic's): source tasks
    # are never fewer, and a source-partitions knob (Kafka's minPartitions) only splits them where the cores outnumber


def cores_and_interval(
    profile: StreamProfile,
    knobs_with: Callable[[int, float], Knobs],
    source_rate: float,
    target: float,
    limits: Limits,
    notes: list[str],
) -> tuple[int, float]:
    """The shortest trigger interval (the current one, or longer in half seconds) at which the cores the rate needs
    keep their fixed costs within their share, and those cores.

    At each interval, a core count *sustains* the rate when the predicted capacity covers it at the target
    utilization. Among those, the fewest that also reach ``target`` (rate plus catch-up) at full utilization: the
    headroom kept for the steady state is what clears a backlog, so catch-up only adds cores beyond it. Then catch-up
    is cut back where it would leave the steady state below ``utilization_floor`` (the policy would scale such a plan
    down again once caught up): the most cores that stay above it. Where the batch's fixed costs at the cores chosen
    take more than ``max_coordination`` of the budget (Drizzle), the interval grows, never the cores: more cores can
    shrink fixed costs (fewer waves of per-task commits) but idle the rest of every batch, while a longer interval
    spreads the same costs over more events (up to ``max_trigger_interval_s``, where any share passes). With CPUs
    unbounded and no costs per task this is the closed form of the module docstring; past the CPUs a stage's CPU work
    stops scaling (the roofline of ``profile.StreamProfile.stage_ms_per_event``), and costs per task grow with the
    cores, so a longer interval can need fewer cores.
    """
    current = profile.knobs
    core_counts = range(limits.min_cores, limits.max_cores + 1)
    longest = limits.max_trigger_interval_s if limits.plan_trigger else current.trigger_interval_s
    for interval in _intervals_to_try(current.trigger_interval_s, longest):
        knobs = {c: knobs_with(c, interval) for c in core_counts}
        sustaining = [c for c, k in knobs.items() if profile.capacity(k, limits.utilization) >= source_rate]
        if not sustaining:
            continue
        cores, why = _chosen_cores(profile, knobs, sustaining, source_rate, target, limits)
        if interval_for(profile.fixed_ms_for(knobs[cores]), interval, limits) != interval:
            continue  # a longer interval spreads them (the longest allowed passes any share)
        notes.extend(why)
        if interval != current.trigger_interval_s:
            notes.append(_longer_interval_note(profile, knobs[cores], current, interval, limits))
        return cores, interval
    cores = limits.max_cores
    interval = interval_for(
        profile.fixed_ms_for(knobs_with(cores, current.trigger_interval_s)), current.trigger_interval_s, limits
    )
    cpu_bound = (
        math.isfinite(profile.cpus) and profile.capacity(knobs_with(cores, interval), limits.utilization) < source_rate
    )
    notes.append(
        "no core count up to the maximum sustains the rate: "
        + (
            "its CPU work needs more CPUs than this machine has (run on a cluster)"
            if cpu_bound
            else "operators that cannot be parallelized, or fixed batch costs, take the budget"
        )
    )
    return cores, interval


def _intervals_to_try(current_s: float, longest_s: float) -> list[float]:
    """The current interval, then longer ones in half seconds, ending on ``longest_s`` itself (where any fixed-cost
    share passes), whatever the current one's fraction; a processing-time trigger of 0 (as fast as it can) alone."""
    if current_s <= 0:
        return [current_s]
    steps = int(max(0.0, longest_s - current_s) * 2)
    intervals = [current_s + 0.5 * k for k in range(steps + 1)]
    return intervals + [longest_s] if intervals[-1] < longest_s else intervals


def _chosen_cores(
    profile: StreamProfile,
    knobs: dict[int, Knobs],
    sustaining: list[int],
    source_rate: float,
    target: float,
    limits: Limits,
) -> tuple[int, list[str]]:
    """Among ``sustaining`` counts, the fewest that reach ``target`` at full utilization (else the most), cut back
    to the most that keep the steady state above ``utilization_floor``; and the note that says so."""
    catching_up = [c for c in sustaining if profile.capacity(knobs[c]) >= target]
    cores = catching_up[0] if catching_up else sustaining[-1]
    if limits.utilization_floor <= 0 or profile.capacity(knobs[cores], limits.utilization_floor) <= source_rate:
        return cores, []
    in_band = [
        c for c in sustaining if c <= cores and profile.capacity(knobs[c], limits.utilization_floor) <= source_rate
    ]
    bounded = in_band[-1] if in_band else sustaining[0]
    if bounded == cores:
        return cores, []
    return bounded, [
        f"catch-up cut back to {bounded} cores ({cores} would leave the steady state below "
        f"{limits.utilization_floor:.0%} of the interval); the backlog clears more slowly"
    ]


def _longer_interval_note(
    profile: StreamProfile, chosen: Knobs, current: Knobs, interval: float, limits: Limits
) -> str:
    return (
        f"fixed costs {profile.fixed_ms_for(chosen):.0f} ms per batch at {chosen.cores} cores: at "
        f"{current.trigger_interval_s:g} s they take more than {limits.max_coordination:.0%} of the target's "
        f"{limits.utilization:.0%} of the interval, and a longer interval spreads them where more cores would idle; "
        f"trigger interval {current.trigger_interval_s:g} s -> {interval:g} s"
    )


def shortfall(profile: StreamProfile, knobs: Knobs, source_rate: float, target: float, limits: Limits) -> str | None:
    """Why a plan would not keep ``knobs``, by the tests :func:`cores_and_interval` chooses with, in its order (None:
    they pass): the steady state over the target utilization, fixed costs over their share of the interval, or no
    headroom to reach ``target`` (rate plus catch-up) where more cores would. So a refusal names the test that
    failed, with its figures, and never one that passed."""
    interval = knobs.trigger_interval_s
    share = profile.batch_ms_for(source_rate * interval, knobs) / (interval * 1000.0) if interval > 0 else math.inf
    if profile.capacity(knobs, limits.utilization) < source_rate:
        return f"would take {share:.0%} of the interval (target {limits.utilization:.0%})"
    fixed = profile.fixed_ms_for(knobs)
    if interval_for(fixed, interval, limits) != interval:
        return (
            f"would spend {fixed:,.0f} ms of each {interval:g} s batch on fixed costs (at most "
            f"{limits.max_coordination:.0%} of the target's {limits.utilization:.0%})"
        )
    if profile.capacity(knobs) < target:
        return (
            f"would take {share:.0%} of the interval but catch up at most {profile.capacity(knobs) - source_rate:,.0f} "
            f"events/s of the {target - source_rate:,.0f}/s wanted"
        )
    return None


def interval_for(fixed_ms: float, interval: float, limits: Limits) -> float:
    """``interval``, or the shortest longer one (in half seconds) in which ``fixed_ms`` takes at most
    ``max_coordination``; ``interval`` itself where the plan may not change it (the definition's own trigger)."""
    if interval <= 0 or not limits.plan_trigger:
        return interval
    if fixed_ms <= limits.max_coordination * limits.utilization * interval * 1000.0:
        return interval
    wanted = fixed_ms / (limits.max_coordination * limits.utilization * 1000.0)
    return min(limits.max_trigger_interval_s, max(interval, math.ceil(wanted * 2) / 2))
