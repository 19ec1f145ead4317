"""DS2's optimal parallelism, and its adaptation to Spark's micro-batches.

DS2 (OSDI'18), for a pipelined dataflow: with operators in topological order, the
target input rate of each operator is the sum of its upstream operators' target
outputs (sources: the source rate), its target output is that times its selectivity,
and its optimal parallelism is ``ceil(target input / true processing rate)``, where
the true rate is measured per instance over useful time only. One pass, one step.

Spark is not pipelined. A micro-batch runs its stages one after another on the same
task slots, and pays a fixed coordination cost per batch. So (symbols as in
:mod:`dagster_reconf.core.scaling.profile`; ``e`` events per batch, ``T`` the trigger interval, ``u`` the target
utilization of the interval, ``c`` cores, ``q_i`` the tasks of operator ``i`` at once: ``min(partitions_i, c)``, less
where they run in waves, below)::

    batch(e) = C + sum_i (e * a_i / q_i + o_i)  <=  u * T,       e = lambda * T

Each ``lambda * a_i`` is DS2's fractional parallelism of operator ``i`` (target input
over true rate, in core-seconds per second), so the cores a micro-batch stream needs
are *the sum of its operators' DS2 parallelisms*, stretched by the share of the
interval left after the fixed costs::

    c = ceil( lambda * T * sum_i a_i  /  (u * T - C - sum_i o_i) )

(operators whose partitions cannot grow keep their ``q_i`` and their time is moved to
the fixed side). Then:

* source partitions follow the cores: a stage cannot use more cores than it has
  partitions. State partitions grow with the cores only where the stateful stages
  need them (DS2 sizes each operator): where the planned cores with the state
  partitions kept still sustain the rate and reach its catch-up (within 5 %, as far as
  more partitions would), they stay, and the reconfiguration needs no state migration in
  its pause (capacity beyond what the plan needs is not worth a longer pause);
* waves: a stage of ``n`` tasks on ``c`` cores runs in ``ceil(n / c)`` waves, so its
  ``q_i`` is ``n / ceil(n / c)`` (8 state or topic partitions on 3 cores: 2.67; on 5 to 7
  cores: 4). The fewest cores that sustain the rate are therefore aligned to a divisor of
  the partitions wherever a divisor serves as well, and never raised past what the rate
  needs;
* batch sizing (Drizzle): when the fixed costs at the cores the rate needs take more than
  ``max_coordination`` of the budget, the interval grows until they do not; cores are never
  added for it (fewer waves of per-task commits shrink fixed costs, but the cores idle the
  rest of every batch). A stage's fixed cost ``o_i`` includes its CPU per task,
  ``n_i * t_i / min(q_i, P)`` (see ``cost_split.fit_task_costs``), which grows with the
  cores: the share is checked at the cores chosen, and the cores chosen again at a longer
  interval;
* uncertainty: one configuration cannot tell waiting from queueing for a CPU where the
  profile's stages ran more tasks than CPUs, nor a Python stage's CPU per task from its CPU
  per event, nor how tasks that will share CPUs overlap their waits with each other's
  CPU (:meth:`~dagster_reconf.core.scaling.profile.StreamProfile.batch_ms_band`); the plan is made on the
  reading that keeps fewer cores slow (what the least-queued tasks did not spend on a CPU
  read as waiting, per event), and ``batch_ms_planned_low``
  and ``batch_ms_planned_high`` give the band's ends (noted where either is more than
  15 % away);
* backlog: the backlog (and what accumulates while the stream restarts) spread over
  the catch-up duration is added to ``lambda`` with ``u = 1``: the headroom kept for
  the steady state clears it, and only a backlog beyond what that headroom clears in
  time adds cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import pandas as pd

from dagster_reconf.core.scaling.scaling_plan import Knobs
from dagster_reconf.core.scaling.sizing import Limits, cores_and_interval, interval_for, shortfall
from dagster_reconf.core.scaling.source_tasks import source_aligned_cores, source_partitions

if TYPE_CHECKING:
    from dagster_reconf.core.scaling.profile import StreamProfile

__all__ = [
    "Limits",
    "MicroBatchPlan",
    "ds2_parallelism",
    "operator_graph",
    "plan_micro_batches",
    "plan_summary",
    "shortfall",
]


STATE_CAPACITY_TOLERANCE = 0.05  # how far short of a plan's needs kept state partitions may fall (no migration)
BAND_NOTED = 0.15  # a plan notes its uncertainty where the two readings of its profile differ by more


def ds2_parallelism(graph: nx.DiGraph, source_rates: dict[str, float]) -> dict[str, dict[str, float]]:
    """DS2's optimal parallelism for a pipelined graph, in one pass.

    Args:
        graph: operators as nodes with ``true_processing_rate`` (records/s per instance of
            useful time) and ``selectivity`` (records out per record in) attributes.
        source_rates: target input rate (records/s) of each source operator.

    Returns:
        per operator: ``target_input``, ``target_output``, ``parallelism`` (ceil) and
        ``exact`` (the fraction before rounding up).
    """
    out: dict[str, dict[str, float]] = {}
    for node in nx.topological_sort(graph):
        attrs = graph.nodes[node]
        target_in = source_rates.get(node, 0.0) + sum(out[u]["target_output"] for u in graph.predecessors(node))
        rate = float(attrs["true_processing_rate"])
        exact = target_in / rate if rate > 0 else 0.0
        out[node] = {
            "target_input": target_in,
            "target_output": target_in * float(attrs["selectivity"]),
            "exact": exact,
            "parallelism": max(1, math.ceil(exact - 1e-9)),
        }
    return out


def operator_graph(profile: StreamProfile) -> nx.DiGraph:
    """Logical operators and their data edges: a stage feeds the stage one level nearer its job's end."""
    graph = nx.DiGraph()
    ops = profile.operators
    for row in ops.itertuples():
        graph.add_node(
            row.operator,
            true_processing_rate=row.true_processing_rate,
            selectivity=row.selectivity,
            records_in_per_event=row.records_in_per_event,
        )
    jobs = ops["operator"].str.extract(r"^j(\d+)\.")[0]
    for job in jobs.unique():
        members = ops[jobs == job]
        for upper in members.itertuples():
            for lower in members[members["depth"] == upper.depth - 1].itertuples():
                graph.add_edge(upper.operator, lower.operator)
    return graph


@dataclass
class MicroBatchPlan:
    """The knobs the model recommends, with the per-operator evidence."""

    knobs: Knobs
    target_rate: float  # source events/s planned for (rate + catch-up)
    report: pd.DataFrame  # per operator
    predicted: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan_micro_batches(
    profile: StreamProfile,
    source_rate: float,
    backlog: float = 0.0,
    restart_s: float = 0.0,
    limits: Limits | None = None,
    max_per_trigger: int | None = None,
) -> MicroBatchPlan:
    """Knobs that sustain ``source_rate`` (and clear ``backlog``) within ``limits`` (see module docstring);
    ``max_per_trigger``: a cap the plan raises to (one that binds, admission): every configuration weighed reads
    batches of it."""
    limits = limits or Limits()
    current = profile.knobs
    notes: list[str] = []
    catch_up = (backlog + source_rate * restart_s) / limits.catch_up_s
    target = source_rate + catch_up
    ops = profile.operators

    stateful = bool((ops["kind"] == "shuffle").any())

    def knobs_with(cores: int, interval: float) -> Knobs:
        state = current.state_partitions
        if stateful and cores > state and limits.allow_state_migration:
            state = int(min(max(cores, limits.min_state_partitions), limits.max_state_partitions))
        return Knobs(
            cores=cores,
            source_partitions=source_partitions(current, cores, limits.source_partition_floor),
            state_partitions=state,
            trigger_interval_s=interval,
            max_per_trigger=max_per_trigger,
        )

    cores, interval = cores_and_interval(profile, knobs_with, source_rate, target, limits, notes)

    state_partitions = current.state_partitions
    if stateful and cores > state_partitions:
        if not limits.allow_state_migration:
            notes.append(
                f"{cores} cores wanted but only {state_partitions} state partitions and state migration is off"
            )
        elif _state_limits(profile, knobs_with(cores, interval), current.state_partitions, limits, source_rate, target):
            state_partitions = knobs_with(cores, interval).state_partitions
            notes.append(
                f"state partitions {current.state_partitions} -> {state_partitions} "
                f"so {cores} cores can share the state"
            )
        else:
            kept = knobs_with(cores, interval).model_copy(update={"state_partitions": state_partitions})
            sustained = profile.capacity(kept, limits.utilization)
            reachable = min(source_rate, profile.capacity(knobs_with(cores, interval), limits.utilization))
            keeps_up = sustained >= reachable
            notes.append(
                f"state partitions stay {state_partitions}: at {cores} cores the stateful stages "
                + ("keep up with them" if keeps_up else f"fall {1 - sustained / reachable:.1%} short with them")
                + f" ({sustained:.0f} events/s at {limits.utilization:.0%} of the interval, for {source_rate:.0f} "
                "wanted), "
                + (
                    "and a state migration would lengthen the pause"
                    if keeps_up
                    else f"under the {STATE_CAPACITY_TOLERANCE:.0%} that is worth a state migration in the pause"
                )
            )
    cores = source_aligned_cores(current, cores, stateful, limits.source_partition_floor, limits.min_cores, notes)
    if stateful:
        _note_waves(cores, state_partitions, "state partitions", "the stateful stages", notes)
    if limits.source_partition_floor:
        _note_waves(cores, limits.source_partition_floor, "topic partitions", "the source stage", notes)
    knobs = Knobs(
        cores=cores,
        source_partitions=source_partitions(current, cores, limits.source_partition_floor),
        state_partitions=state_partitions,
        trigger_interval_s=interval,
        max_per_trigger=max(
            max_per_trigger or 0,
            _batch_cap(profile, current, cores, state_partitions, interval, limits.source_partition_floor) or 0,
        )
        or None,
    )
    report = _report(profile, knobs, target)
    planned_batch = target * max(interval, 1.0)
    predicted = {
        "capacity_now": profile.capacity(current),
        "capacity_planned": profile.capacity(knobs),
        "target_rate": target,
        "batch_ms_planned": profile.batch_ms_for(planned_batch, knobs),
        **dict(zip(("batch_ms_planned_low", "batch_ms_planned_high"), profile.batch_ms_band(planned_batch, knobs))),
        "utilization_planned": target / max(profile.capacity(knobs), 1e-9)
        if math.isfinite(profile.capacity(knobs))
        else 0.0,
        "coordination_share": profile.fixed_ms_for(knobs) / (interval * 1000.0) if interval > 0 else 0.0,
    }
    point, low, high = (predicted[k] for k in ("batch_ms_planned", "batch_ms_planned_low", "batch_ms_planned_high"))
    if low < (1.0 - BAND_NOTED) * point or high > (1.0 + BAND_NOTED) * point:
        notes.append(
            f"uncertain: a batch under the plan takes {point:.0f} ms, anywhere from {low:.0f} to {high:.0f} ms "
            "by what one configuration cannot tell (tasks that shared CPUs waiting or queueing for them, Python "
            "CPU per event or per task, tasks sharing CPUs overlapping their waits or not); a second "
            "configuration narrows it"
        )
    return MicroBatchPlan(knobs=knobs, target_rate=target, report=report, predicted=predicted, notes=notes)


def _note_waves(cores: int, partitions: int, what: str, stages: str, notes: list[str]) -> None:
    """Say where ``cores`` do not divide ``partitions`` (the plan counted the waves, so it chose them knowingly)."""
    if cores < partitions and partitions % cores:
        waves = math.ceil(partitions / cores)
        notes.append(
            f"{cores} cores read the {partitions} {what} in {waves} waves: {stages} run as fast as on "
            f"{partitions / waves:.3g} cores, and the plan counted it"
        )


def _state_limits(
    profile: StreamProfile, grown: Knobs, state_partitions: int, limits: Limits, source_rate: float, target: float
) -> bool:
    """Whether keeping ``state_partitions`` under ``grown``'s cores falls short of what those cores were planned for:
    DS2 sizes each operator, and a stateful stage whose work is small keeps up with fewer partitions than there are
    cores. Kept, the configuration must sustain ``source_rate`` at the target utilization and reach ``target`` (rate
    plus catch-up) at full utilization, each as far as ``grown`` does, within :data:`STATE_CAPACITY_TOLERANCE`, and
    its fixed costs must fit the interval. Capacity beyond that is not worth a migration in the pause."""
    kept = grown.model_copy(update={"state_partitions": state_partitions})
    with_more, with_kept = profile.capacity(grown), profile.capacity(kept)
    if not math.isfinite(with_more):
        return math.isfinite(with_kept)

    def short(kept_rate: float, grown_rate: float, wanted: float) -> bool:
        return kept_rate < (1.0 - STATE_CAPACITY_TOLERANCE) * min(grown_rate, wanted)

    return (
        short(profile.capacity(kept, limits.utilization), profile.capacity(grown, limits.utilization), source_rate)
        or short(with_kept, with_more, target)
        or interval_for(profile.fixed_ms_for(kept), grown.trigger_interval_s, limits) != grown.trigger_interval_s
    )


def _batch_cap(
    profile: StreamProfile, current: Knobs, cores: int, state_partitions: int, interval: float, floor: int | None
) -> int | None:
    """Keep a cap per batch (if the stream has one) in step with what a batch can process within the interval.

    The cap is in the source's own unit (records, offsets, files), so it is scaled by the
    ratio of planned to current batch capacity rather than set in events. Only rescaled
    along with the cores or the interval: a cap alone is not worth a restart. When the
    cap binds on an overloaded stream its batches hold more than one interval's worth
    (they run long), so the cap is compared with the events it lets in, not with what
    an interval processes: otherwise the planned cap admits several intervals' worth
    and the first batches after the change run far past the interval. A plan that gives
    cores back scales the cap at least with the interval.
    """
    if current.max_per_trigger is None or interval <= 0 or current.trigger_interval_s <= 0:
        return current.max_per_trigger
    if cores == current.cores and interval == current.trigger_interval_s:
        return current.max_per_trigger
    knobs = Knobs(
        cores=cores,
        source_partitions=source_partitions(current, cores, floor),
        state_partitions=state_partitions,
        trigger_interval_s=interval,
    )
    planned = profile.capacity(knobs, utilization=1.0) * interval
    now = max(profile.capacity(current, utilization=1.0) * current.trigger_interval_s, profile.events_per_batch)
    if not (math.isfinite(planned) and math.isfinite(now)) or planned <= 0 or now <= 0:
        return current.max_per_trigger
    ratio = planned / now
    if cores <= current.cores:
        # Giving cores back: an over-provisioned stream's cap never bound, so its capacity says nothing of what the cap
        # lets in; the cap keeps its share of an interval's arrivals instead (else it starves the planned batches).
        ratio = max(ratio, interval / current.trigger_interval_s)
    return max(1, round(current.max_per_trigger * ratio))


def _report(profile: StreamProfile, knobs: Knobs, target_rate: float) -> pd.DataFrame:
    """The scaling report per operator: parallelism a -> b, capacity, target rate, the evidence."""
    ops = profile.operators
    graph = operator_graph(profile)
    ds2 = ds2_parallelism(
        graph,
        {
            row.operator: target_rate * row.records_in_per_event
            for row in ops.itertuples()
            if graph.in_degree(row.operator) == 0
        },
    )
    now, planned = profile.parallelism(profile.knobs), profile.parallelism(knobs)
    budget_now = _budget(profile, profile.knobs)
    budget_planned = _budget(profile, knobs)
    work = ops["work_ms_per_event"].to_numpy()
    stage_now, stage_planned = profile.stage_ms_per_event(profile.knobs), profile.stage_ms_per_event(knobs)
    with np.errstate(divide="ignore"):
        # events/s the operator keeps up with if it had the whole budget: share * 1000 ms / (ms per event)
        capacity_now = np.where(stage_now > 0, budget_now * 1000.0 / np.maximum(stage_now, 1e-12), np.inf)
        capacity_planned = np.where(
            stage_planned > 0, budget_planned * 1000.0 / np.maximum(stage_planned, 1e-12), np.inf
        )
    return pd.DataFrame(
        {
            "operator": ops["operator"],
            "kind": ops["kind"],
            "parallelism_now": now.astype(int),
            "parallelism_planned": planned.astype(int),
            "ds2_parallelism": [ds2[o]["parallelism"] for o in ops["operator"]],
            "target_records_per_s": target_rate * ops["records_in_per_event"],
            "true_processing_rate": ops["true_processing_rate"],
            "selectivity": ops["selectivity"],
            "work_ms_per_event": work,
            "cpu_ms_per_event": ops["cpu_ms_per_event"],
            "capacity_now_events_per_s": capacity_now,
            "capacity_planned_events_per_s": capacity_planned,
            "skew": ops["skew"],
        }
    )


def _budget(profile: StreamProfile, knobs: Knobs) -> float:
    """Share of the trigger interval left for work after a batch's fixed costs."""
    if knobs.trigger_interval_s <= 0:
        return 1.0
    return max(0.0, knobs.trigger_interval_s * 1000.0 - profile.fixed_ms_for(knobs)) / (
        knobs.trigger_interval_s * 1000.0
    )


def plan_summary(plan: MicroBatchPlan) -> dict[str, Any]:
    """The plan's headline figures (for logs and metadata)."""
    return {"knobs": plan.knobs.model_dump(), "target_rate": plan.target_rate, **plan.predicted, "notes": plan.notes}
