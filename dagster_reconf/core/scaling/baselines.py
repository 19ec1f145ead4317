"""Baselines with the policy's interface, for the convergence benchmark: :class:`DhalionPolicy` (one bottleneck per
step, a fixed increment) and :class:`DynamicAllocationPolicy` (Spark's dynamic allocation: double on backlog, halve
when idle)."""

from __future__ import annotations

from dagster_reconf.core.scaling.policy import ScalingPolicy

__all__ = ["DhalionPolicy", "DynamicAllocationPolicy"]


class DhalionPolicy(ScalingPolicy):
    """Dhalion-style baseline: resolve one bottleneck per step with a fixed increment."""

    name = "dhalion"

    def _plan(self, stream, current, obs, profile, direction, epoch, restart_s, lead_s):
        step = self.config.increment if direction == "scale_up" else -self.config.increment
        bottleneck = ""
        if profile is not None and len(profile.operators):
            slowest = profile.operators.assign(load=profile.stage_ms_per_event(current))
            bottleneck = f" at the bottleneck {slowest.sort_values('load').iloc[-1]['operator']}"
        target = self._bounded(current, current.cores + step)
        return self._decision(
            stream, current, target, obs, direction, f"Dhalion: {'+' if step > 0 else ''}{step} core{bottleneck}", epoch
        )


class DynamicAllocationPolicy(ScalingPolicy):
    """Spark dynamic-allocation-style baseline: double on backlog, halve when idle."""

    name = "dynalloc"

    def _plan(self, stream, current, obs, profile, direction, epoch, restart_s, lead_s):
        cores = current.cores * 2 if direction == "scale_up" else max(1, current.cores // 2)
        target = self._bounded(current, cores)
        return self._decision(
            stream,
            current,
            target,
            obs,
            direction,
            f"dynamic allocation: {current.cores} -> {target.cores} cores",
            epoch,
        )
