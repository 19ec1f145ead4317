"""The shared part of every scaling policy: the metric window, stabilization, the utilization band, delayed
scale-down, and the :class:`Decision` it returns. DS2's policy (:mod:`dagster_reconf.core.scaling.ds2_policy`) and the
baselines (:mod:`dagster_reconf.core.scaling.baselines`) fill in what to plan.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from dagster_reconf.core.scaling.admission import judge_cap
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.profile import StreamProfile
from dagster_reconf.core.scaling.scaling_plan import Knobs, OperatorScaling, ScalingPlan, ScalingStep
from dagster_reconf.core.scaling.signal import Signal

__all__ = ["Decision", "Direction", "ScalingPolicy", "settled", "wanted_but"]

# cannot_keep_up: the stream falls behind and no plan within the policy's bounds would change that (the reason says
# what would): never a hold, which means the stream keeps up.
Direction = Literal["scale_up", "scale_down", "hold", "skew", "cannot_keep_up"]
ProfileSource = StreamProfile | Callable[[], StreamProfile | None] | None


def wanted_but(direction: Direction) -> str:
    """How a hold against the signal's direction starts: ``fewer cores wanted, but `` (then the reason not to)."""
    return f"{'fewer cores' if direction == 'scale_down' else 'scale up'} wanted, but "


def settled(obs: Signal, current: Knobs) -> bool:
    """No more backlog than two batches' worth: the stream is not catching up."""
    return obs.backlog <= obs.source_rate * max(current.trigger_interval_s, 1.0) * 2


@dataclass
class Decision:
    """A policy's answer for one stream: act (with a plan) or not (with the reason)."""

    action: Direction
    reason: str
    signal: Signal
    plan: ScalingPlan | None = None
    recommend_only: bool = False
    profile: StreamProfile | None = None  # what a plan was made from (scores its prediction once the plan ran)
    current: Knobs | None = None  # the knobs decided on (None where no configuration is known yet)
    judged: bool = True  # False: held before judging a full window (stabilizing, window not full, no evidence)

    @property
    def step(self) -> ScalingStep | None:
        """The step the decision takes (a hold where it plans nothing); None without known knobs."""
        if self.plan is not None:
            return self.plan.step
        return ScalingStep.between(self.current, self.current) if self.current is not None else None

    @property
    def requests_run(self) -> bool:
        """Whether to launch a reconfiguration (not in recommend-only mode)."""
        return self.plan is not None and self.action in ("scale_up", "scale_down") and not self.recommend_only


class ScalingPolicy(ABC):
    """Shared: the metric window, stabilization, the utilization band, delayed scale-down."""

    name = "policy"

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()

    def decide(
        self,
        stream: str,
        current: Knobs,
        observation: Signal,
        profile: ProfileSource = None,
        *,
        epoch: str = "",
        restart_s: float | None = None,
        lead_s: float | None = None,
        plan: bool = True,
    ) -> Decision:
        """Decide for ``stream`` running with ``current`` knobs.

        ``restart_s``: the measured restart (the pause); ``lead_s``: the measured time a
        reconfiguration runs before its pause (a warm standby's start), during which the
        backlog moves at the current settings.

        ``profile`` may be a callable: traces are then read only when a decision needs them.
        ``plan=False`` stops at the direction (a ``scale_up``/``scale_down`` decision with no
        plan): what a light sensor needs to request a run that plans from the traces. Every
        decision carries ``current``, so that it can say its step (:attr:`Decision.step`).
        """
        decision = self._decide(stream, current, observation, profile, epoch, restart_s, lead_s or 0.0, plan)
        if decision.action == "hold" and decision.judged and self._falls_behind(observation, current):
            decision = replace(decision, action="cannot_keep_up", reason=f"cannot keep up: {decision.reason}")
        return replace(decision, current=current)

    def _falls_behind(self, obs: Signal, current: Knobs) -> bool:
        """A backlog of more than one interval's arrivals that grows past the tolerance: what a hold may never be."""
        tolerance = self.config.backlog_growth_tolerance * max(obs.source_rate, 1.0)
        return obs.backlog_growth > tolerance and obs.has_backlog(current.trigger_interval_s)

    def _decide(
        self,
        stream: str,
        current: Knobs,
        observation: Signal,
        profile: ProfileSource,
        epoch: str,
        restart_s: float | None,
        lead_s: float,
        plan: bool,
    ) -> Decision:
        cfg, obs = self.config, observation
        if obs.config_age_s < cfg.stabilization_s:
            return Decision(
                "hold",
                f"stabilizing: {obs.config_age_s:.0f} s since the last reconfiguration (< {cfg.stabilization_s:g} s)",
                obs,
                judged=False,
            )
        if obs.backlog_unknown is not None:
            return Decision(
                "hold",
                f"backlog unknown: {obs.backlog_unknown}; without it the policy cannot tell whether "
                "the stream keeps up",
                obs,
                judged=False,
            )
        if obs.batches < cfg.window_batches:
            return Decision(
                "hold", f"metric window not full: {obs.batches} of {cfg.window_batches} batches", obs, judged=False
            )
        direction = self._direction(obs, current)
        model_check = False
        if direction is None and plan and self._may_be_over_provisioned(obs, current):
            direction, model_check = "scale_down", True  # the model decides (see DS2Policy)
        if direction is None and obs.backlog_growth < 0 and obs.has_backlog(current.trigger_interval_s):
            return Decision(
                "hold",
                f"catching up: backlog {obs.backlog:,.0f} events shrinks {-obs.backlog_growth:,.0f}/s "
                f"(clear in {obs.backlog / -obs.backlog_growth:.0f} s < {cfg.catch_up_s:g} s)",
                obs,
            )
        if direction is None and obs.utilization > cfg.utilization_high:  # the batches that cleared a backlog
            return Decision(
                "hold",
                f"caught up: backlog {obs.backlog:,.0f} events, under one interval's arrivals, shrinking "
                f"{-obs.backlog_growth:,.0f}/s; the batches' utilization {obs.utilization:.2f} is the catch-up's, "
                "not the steady state's",
                obs,
            )
        if direction is None:
            return Decision("hold", f"in band: {_figures(obs)}", obs)
        if direction == "scale_down" and obs.config_age_s < cfg.scale_down_delay_s:
            signal = (
                f"in band (utilization {obs.utilization:.2f}), but perhaps over-provisioned: "
                "the model-checked scale-down waits"
                if model_check
                else f"over-provisioned (utilization {obs.utilization:.2f}) but scale-down waits"
            )
            return Decision("hold", f"{signal} {cfg.scale_down_delay_s:g} s; {obs.config_age_s:.0f} s so far", obs)
        if direction == "scale_up" and obs.admission is not None and current.max_per_trigger is None:
            # The user's own cap holds it back: no plan raises it (the knob's cap is planned: DS2Policy._raise_cap).
            wanted = obs.source_rate + obs.backlog / cfg.catch_up_s
            verdict = judge_cap(
                obs.admission,
                knob=None,
                interval_s=current.trigger_interval_s,
                batch_s=obs.batch_ms / 1000.0,
                offered=obs.source_rate,
                wanted=wanted,
                tolerance=cfg.backlog_growth_tolerance,
            )
            if verdict is not None and verdict.keeps_up:
                return Decision("hold", f"catching up slowly: {verdict.reason}", obs)
            if verdict is not None:
                return Decision("cannot_keep_up", f"cannot keep up: {verdict.reason}", obs)
        if not plan:
            return Decision(
                direction,
                f"{direction.replace('_', ' ')} wanted: utilization {obs.utilization:.2f}, backlog "
                f"{obs.backlog:,.0f} events ({obs.backlog_growth:+,.0f}/s), {obs.processed_rate:,.0f} of "
                f"{obs.source_rate:,.0f} events/s",
                obs,
            )
        # The backlog grows through the restart and then through the warm-up that stabilization waits out
        # (a new SparkContext starts its Python workers in its first batches): the catch-up counts both.
        restart = (cfg.default_restart_s if restart_s is None else restart_s) + cfg.stabilization_s
        measured = profile() if callable(profile) else profile
        decision = self._plan(stream, current, obs, measured, direction, epoch, restart, lead_s)
        if model_check and decision.action == "hold":  # the model found no worthwhile saving: the stream is in band
            checked = decision.reason.removeprefix(wanted_but("scale_down"))
            decision = replace(decision, reason=f"in band: {_figures(obs)}; checked for fewer cores: {checked}")
        return replace(decision, profile=measured)

    def _direction(self, obs: Signal, current: Knobs) -> Direction | None:
        """Which way the signal points, or None in band. High utilization while a backlog clears in time is fine."""
        cfg = self.config
        tolerance = cfg.backlog_growth_tolerance * max(obs.source_rate, 1.0)
        if obs.backlog_growth > tolerance:
            return "scale_up"
        clearing = obs.backlog_growth < -tolerance
        if clearing:
            return "scale_up" if obs.backlog / -obs.backlog_growth > cfg.catch_up_s else None
        if obs.backlog > obs.source_rate * cfg.catch_up_s or obs.utilization > cfg.utilization_high:
            return "scale_up"
        if obs.utilization < cfg.utilization_low and settled(obs, current) and current.cores > cfg.min_cores:
            return "scale_down"
        return None

    def _may_be_over_provisioned(self, obs: Signal, current: Knobs) -> bool:
        """In band by the utilization signal, but perhaps not by the work: a policy with a model says so here.

        Batch duration over the interval overstates the work where fixed batch costs (scheduling,
        per-task Python costs) take much of a batch: 12 cores doing 2 core-seconds of work a
        second still show 0.4. Only a model of where the time goes can tell; the baselines have
        none, so they never look.
        """
        return False

    @abstractmethod
    def _plan(
        self,
        stream: str,
        current: Knobs,
        obs: Signal,
        profile: StreamProfile | None,
        direction: Direction,
        epoch: str,
        restart_s: float,
        lead_s: float,
    ) -> Decision:
        """How far to move, once the shared checks say to move."""

    def _decision(
        self,
        stream: str,
        current: Knobs,
        target: Knobs,
        obs: Signal,
        direction: Direction,
        reason: str,
        epoch: str,
        report: list[OperatorScaling] | None = None,
        predicted: dict[str, float] | None = None,
    ) -> Decision:
        if target == current:
            return Decision("hold", f"{wanted_but(direction)}{reason}", obs)
        plan = ScalingPlan(
            stream=stream,
            policy=self.name,
            current=current,
            target=target,
            reason=reason,
            epoch=epoch,
            report=report or [],
            predicted={**(predicted or {}), **{f"observed_{k}": v for k, v in obs.as_dict().items()}},
        )
        return Decision(direction, reason, obs, plan, recommend_only=self.config.recommend_only)

    def _bounded(self, current: Knobs, cores: int) -> Knobs:
        """``current`` with ``cores`` (bounded), partitions raised so the cores can be used."""
        cfg = self.config
        cores = int(min(max(cores, cfg.min_cores), cfg.max_cores))
        state = current.state_partitions
        if cores > state and cfg.allow_state_migration:
            state = min(cores, cfg.max_state_partitions)
        source = max(cores, 1) if current.source_partitions is not None else None
        return current.model_copy(update={"cores": cores, "source_partitions": source, "state_partitions": state})


def _figures(obs: Signal) -> str:
    """The signal's figures a hold in band states."""
    return (
        f"utilization {obs.utilization:.2f}, backlog {obs.backlog:,.0f} events ({obs.backlog_growth:+,.0f}/s), "
        f"{obs.processed_rate:,.0f} of {obs.source_rate:,.0f} events/s"
    )
