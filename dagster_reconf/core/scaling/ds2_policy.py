"""The production policy around DS2: plan the parallelism the model says sustains the offered rate, in one step,
inside the policy's band and bounds, and only where the change pays for its own restart."""

from __future__ import annotations

import math
from dataclasses import replace

from dagster_reconf.core.scaling.admission import CapVerdict, judge_cap
from dagster_reconf.core.scaling.model import MicroBatchPlan, plan_micro_batches
from dagster_reconf.core.scaling.policy import Decision, ScalingPolicy, settled, wanted_but
from dagster_reconf.core.scaling.profile import StreamProfile
from dagster_reconf.core.scaling.scaling_plan import Knobs, OperatorScaling
from dagster_reconf.core.scaling.signal import Signal
from dagster_reconf.core.scaling.sizing import Limits, shortfall
from dagster_reconf.core.scaling.skew import hot_task_excess_ms, skewed_operators
from dagster_reconf.core.scaling.source_tasks import source_partitions

__all__ = ["DS2Policy"]


def _same_resources(target: Knobs, current: Knobs) -> bool:
    """Whether ``target`` keeps the cores and state partitions of ``current`` (only the interval or the cap move)."""
    return target.cores == current.cores and target.state_partitions == current.state_partitions


CATCH_UP_GAIN = 0.25  # a pause to clear a shrinking backlog sooner must clear it at least this much sooner
NO_GAIN_TOLERANCE = 0.05  # more cores whose steady state the model puts within this of fewer cores' buy nothing


def _clears_sooner(obs: Signal, at_pause: float, capacity: float, restart_s: float, lead_s: float) -> str | None:
    """Why a backlog that already shrinks is not worth a reconfiguration to clear it faster (None: it is).

    Until the pause (``lead_s``: a warm standby's start) it goes on shrinking at the current
    cores, to ``at_pause``; the pause then stops the catch-up for ``restart_s`` (the restart and the warm-up
    after it) while the backlog grows, so more cores can clear it later than the cores in
    place do. A first plan that cut its catch-up back to keep the steady state in band
    leaves just such a backlog, and a re-plan from the new cores' profile can tip the same
    cut-back test the other way. Gains under :data:`CATCH_UP_GAIN` are within the model's
    capacity error (up to 25 % in the convergence benchmark).
    """
    clearing, rate = -obs.backlog_growth, obs.source_rate
    clear_now = obs.backlog / clearing
    if at_pause <= 0:
        clear_after = clear_now
    elif capacity > rate:
        clear_after = lead_s + restart_s + (at_pause + rate * restart_s) / (capacity - rate)
    else:
        clear_after = math.inf
    if clear_after < (1.0 - CATCH_UP_GAIN) * clear_now:
        return None
    return (
        f"catching up: backlog {obs.backlog:,.0f} events shrinks {clearing:,.0f}/s (clear in {clear_now:.0f} s); "
        f"more cores would clear it in {clear_after:.0f} s, counting {lead_s:.0f} s until the pause and "
        f"{restart_s:.0f} s of restart and warm-up: not {CATCH_UP_GAIN:.0%} sooner, not worth a reconfiguration"
    )


def _steady_utilization(profile: StreamProfile, knobs: Knobs, rate: float) -> float:
    """The share of the trigger interval the model puts a batch of ``rate`` under ``knobs`` at (inf: back to back)."""
    interval = knobs.trigger_interval_s
    return profile.batch_ms_for(rate * interval, knobs) / (interval * 1000.0) if interval > 0 else float("inf")


class DS2Policy(ScalingPolicy):
    """DS2's one-step parallelism (adapted to micro-batches) inside the production policy."""

    name = "ds2"

    def _over_provisioning(
        self, profile: StreamProfile, current: Knobs, target: Knobs, rate: float, floor: int | None = None
    ) -> tuple[bool, str]:
        """Whether the model finds ``current`` over-provisioned, and why (or why not): it puts the steady state on
        its cores below the floor DS2's own plans keep (:meth:`PolicyConfig.limits`), or fewer cores (``target``'s,
        or any count between, at the current interval) run it no slower.

        The floor judges only the configuration the profile was measured on, where the model is
        calibrated. A catch-up plan DS2 made keeps its steady state above the floor, so it is
        never undone here, unless its cores buy nothing: where fixed costs grow with the tasks
        (Python workers' set-ups queued on a few CPUs), a stream on too many cores looks busy at
        any count. The fewer cores need not be DS2's plan: past the count
        where set-ups start to queue, cores only lengthen the batch, so a count between can run
        it faster than 12 while the plan, sized for the target utilization, runs it a little
        slower. Both sides of each comparison are the model's predictions, so its bias cancels.
        """
        floor = self.config.limits().utilization_floor
        now = _steady_utilization(profile, current, rate)
        if profile.capacity(current, floor) > rate:
            return True, f"over-provisioned: the model puts {current.cores} cores at {now:.0%} of the interval"
        planned = _steady_utilization(profile, target, rate)
        no_slower = None
        if math.isfinite(now):
            no_slower = (
                (target.cores, planned)
                if planned <= now * (1.0 + NO_GAIN_TOLERANCE)
                else self._no_slower_with_fewer(profile, current, rate, now, floor)
            )
        if no_slower is not None:
            return True, (
                f"over-provisioned: {current.cores} cores buy nothing (the model: {now:.0%} of the interval; "
                f"{no_slower[0]} cores: {no_slower[1]:.0%})"
            )
        return False, (
            f"the model puts {current.cores} cores at or above {floor:.0%} of the interval for {rate:,.0f} "
            f"events/s ({now:.0%}; {target.cores} cores: {planned:.0%}; no fewer within "
            f"{NO_GAIN_TOLERANCE:.0%} of it): not over-provisioned"
        )

    def _no_slower_with_fewer(
        self, profile: StreamProfile, current: Knobs, rate: float, now: float, floor: int | None = None
    ) -> tuple[int, float] | None:
        """The fewest cores (at the current interval and partitions) whose steady state the model puts within
        :data:`NO_GAIN_TOLERANCE` of ``now`` (the current cores' share of the interval), and that share."""
        for cores in range(self.config.min_cores, current.cores):
            source = source_partitions(current, cores, floor)
            share = _steady_utilization(
                profile, current.model_copy(update={"cores": cores, "source_partitions": source}), rate
            )
            if share <= now * (1.0 + NO_GAIN_TOLERANCE):
                return cores, share
        return None

    def _rate_still_moving(
        self, profile: StreamProfile, obs: Signal, target: Knobs, at_pause: float, restart_s: float, limits: Limits
    ) -> str | None:
        """Why a scale-down to ``target`` waits for the offered rate to hold (None: it holds).

        The recent rate spans three intervals; a load that fell inside them reads somewhere between
        the two rates, and a scale-down planned there lands between the two plans. A scale-down is never urgent: it goes
        ahead only where the highest rate of the scale-down delay needs no more cores than the recent one.
        """
        at_peak = plan_micro_batches(profile, obs.peak_rate, at_pause, restart_s, limits).knobs
        if at_peak.cores <= target.cores:
            return None
        return (
            f"{wanted_but('scale_down')}the offered rate moved within the last {obs.peak_span_s:.0f} s: "
            f"{obs.peak_rate:,.0f} events/s at its highest, {obs.source_rate:,.0f} now; DS2 needs {at_peak.cores} "
            f"cores for the first and {target.cores} for the second: waiting for a rate that holds"
        )

    def _raise_cap(
        self,
        stream: str,
        current: Knobs,
        target: Knobs,
        obs: Signal,
        verdict: CapVerdict,
        planned: MicroBatchPlan,
        epoch: str,
    ) -> Decision:
        """The plan for a stream its own cap holds back, where the ``max_per_trigger`` knob is that cap: the cap that
        admits what is wanted, at the interval it has, on the cores DS2 plans for that rate (never fewer)."""
        cores = max(target.cores, current.cores)
        raised = target.model_copy(
            update={
                "cores": cores,
                "source_partitions": target.source_partitions if cores == target.cores else current.source_partitions,
                "max_per_trigger": max(verdict.cap, target.max_per_trigger or 0),
            }
        )
        reason = (
            f"DS2: {obs.source_rate:,.0f} events/s offered, but {verdict.reason}; {cores} cores for "
            f"{planned.target_rate:,.0f} events/s"
        )
        report = [OperatorScaling(**row) for row in planned.report.to_dict(orient="records")]
        return self._decision(stream, current, raised, obs, "scale_up", reason, epoch, report, planned.predicted)

    def _may_be_over_provisioned(self, obs: Signal, current: Knobs) -> bool:
        """In band, settled, with cores to give back: ask the model (its plan needs traces). Above the target
        utilization too: where each task adds a queued set-up, more cores lengthen the batch."""
        cfg = self.config
        return obs.utilization <= cfg.utilization_high and settled(obs, current) and current.cores > cfg.min_cores

    def _plan(self, stream, current, obs, profile, direction, epoch, restart_s, lead_s):
        if profile is None:
            return Decision(
                "hold", f"{wanted_but(direction)}no traces cover the window to plan from", obs, judged=False
            )
        skewed = skewed_operators(profile)
        if skewed:
            ops, excess = profile.operators.set_index("operator"), hot_task_excess_ms(profile)
            hot = "; ".join(
                f"{op}: its slowest task runs {ops.at[op, 'skew']:.1f}x the median, {excess[op]:,.0f} ms more per "
                f"batch ({excess[op] / max(profile.batch_ms, 1e-9):.0%} of a {profile.batch_ms:,.0f} ms batch)"
                for op in skewed
            )
            return Decision(
                "skew",
                f"{hot}: one hot partition holds the batch up, and more parallelism will not shorten it: "
                "spread the hot key (salt it, or pre-aggregate it)",
                obs,
            )
        limits = replace(self.config.limits(), source_partition_floor=obs.source_partitions_seen)
        if direction == "scale_up" and obs.backlog_growth >= 0:  # it falls behind at these cores: fewer will not do
            limits = replace(limits, min_cores=max(limits.min_cores, current.cores))
        if obs.admission is not None:  # a cap per batch binds: a longer interval would admit less (admission)
            limits = replace(limits, plan_trigger=False)
        # The catch-up is for the backlog at the pause: it moves at the current cores until then. Up to one interval's
        # arrivals is what the next batch takes at any steady rate (Signal.has_backlog), not a backlog to clear.
        in_flight = obs.source_rate * current.trigger_interval_s
        at_pause = max(0.0, obs.backlog + obs.backlog_growth * lead_s - in_flight)
        planned = plan_micro_batches(profile, obs.source_rate, at_pause, restart_s, limits)
        target = planned.knobs
        verdict = None
        if direction == "scale_up" and obs.admission is not None:
            verdict = judge_cap(
                obs.admission,
                knob=current.max_per_trigger,
                interval_s=current.trigger_interval_s,
                batch_s=obs.batch_ms / 1000.0,
                offered=obs.source_rate,
                wanted=planned.target_rate,
                tolerance=self.config.backlog_growth_tolerance,
            )
        if verdict is not None and verdict.cap is not None:  # the cores for batches of the raised cap
            planned = plan_micro_batches(profile, obs.source_rate, at_pause, restart_s, limits, verdict.cap)
            return self._raise_cap(stream, current, planned.knobs, obs, verdict, planned, epoch)
        if direction == "scale_down" and target.cores >= current.cores:
            fewer = current.cores - 1
            at_fewer = target.model_copy(
                update={
                    "cores": fewer,
                    "source_partitions": source_partitions(current, fewer, obs.source_partitions_seen),
                }
            )
            why = shortfall(profile, at_fewer, obs.source_rate, planned.target_rate, limits)
            if why is None:  # it passes the planner's tests at this interval: what holds it is elsewhere in the plan
                why = f"would pass, but the plan keeps {target.cores} ({'; '.join(planned.notes) or 'its limits'})"
            return Decision(
                "hold",
                f"{wanted_but('scale_down')}DS2 needs {target.cores} cores for {obs.source_rate:,.0f} events/s "
                f"(+{planned.target_rate - obs.source_rate:,.0f}/s to catch up): {fewer} {why}",
                obs,
            )
        if direction == "scale_down" and obs.peak_rate > obs.source_rate:
            moving = self._rate_still_moving(profile, obs, target, at_pause, restart_s, limits)
            if moving is not None:
                return Decision("hold", moving, obs)
        over_provisioned = None
        if direction == "scale_down" and obs.utilization >= self.config.utilization_low:
            over, why = self._over_provisioning(
                profile, current, target, obs.source_rate, limits.source_partition_floor
            )
            if not over:
                return Decision("hold", why, obs)
            over_provisioned = why
        # A backlog that clears (a utilization over the high mark with nothing behind is no backlog to catch up).
        clearing = obs.backlog_growth < 0 and obs.has_backlog(current.trigger_interval_s)
        if direction == "scale_up" and clearing and target.cores <= current.cores:
            # Clearing, if more slowly than catch_up_s, at the cores the model keeps: the plan cut its catch-up back
            # (more cores would idle once caught up), and another pause would only add to the backlog.
            return Decision(
                "hold",
                f"catching up: backlog {obs.backlog:,.0f} events shrinks {-obs.backlog_growth:,.0f}/s; "
                f"the model needs {target.cores} cores for the steady state, and more would leave "
                "it over-provisioned once caught up",
                obs,
            )
        if direction == "scale_up" and clearing:
            sooner = _clears_sooner(obs, at_pause, planned.predicted["capacity_planned"], restart_s, lead_s)
            if sooner is not None:
                return Decision("hold", sooner + f" (DS2's plan: {target.cores} cores)", obs)
        sustained = profile.capacity(current, limits.utilization)
        if direction == "scale_up" and target.cores < current.cores:
            # Busy batches the model does not explain (nothing behind to catch up): more cores are not what it finds
            # missing, and a scale-up signal never turns into a scale-down.
            return Decision(
                "hold",
                f"{wanted_but('scale_up')}DS2 needs only {target.cores} cores for {planned.target_rate:,.0f} events/s "
                f"(the {current.cores} in place: capacity {sustained:,.0f} at {limits.utilization:.0%} of the "
                "interval); the batches run longer than the model explains, so more cores are not the fix",
                obs,
            )
        if direction == "scale_up" and _same_resources(target, current) and sustained >= planned.target_rate:
            # A rising backlog the model's capacity does not explain (a file landing just after a trigger) is no reason
            # to pause for a longer interval alone: the fixed-cost share it would bound costs throughput only near
            # the capacity, and there is plenty left.
            return Decision(
                "hold",
                f"{wanted_but('scale_up')}DS2: the cores in place ({current.cores}) sustain "
                f"{planned.target_rate:,.0f} events/s (capacity {sustained:,.0f} "
                f"at {limits.utilization:.0%} of the interval); a plan that only moves the trigger interval "
                f"({current.trigger_interval_s:g} s -> {target.trigger_interval_s:g} s) is not worth a pause",
                obs,
            )
        reason = (
            f"DS2: {obs.source_rate:,.0f} events/s offered "
            f"(+{planned.target_rate - obs.source_rate:,.0f}/s to catch up) "
            f"needs {target.cores} cores; capacity {planned.predicted['capacity_now']:,.0f} -> "
            f"{planned.predicted['capacity_planned']:,.0f} events/s"
        )
        if planned.notes:
            reason += "; " + "; ".join(planned.notes)
        if over_provisioned:
            reason += f"; {over_provisioned}"
        report = [OperatorScaling(**row) for row in planned.report.to_dict(orient="records")]
        return self._decision(stream, current, target, obs, direction, reason, epoch, report, planned.predicted)
