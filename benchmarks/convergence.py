"""Steps until a stream sustains its rate: DS2 against Dhalion and dynamic allocation.

``python -m benchmarks.convergence [--quick]``

Each run starts a real stream (in-process driver, local mode) at a fixed rate with a
per-record cost of simulated I/O (``sleep``), so capacity grows with task slots beyond
this machine's 2 cores. A policy watches it exactly as the scaling sensor does (the
configuration window over the metrics store, traces from the event logs), and each
plan it makes is applied by restarting the stream with the plan's knobs. A run has
*converged* when, on a full metric window, the stream keeps up (its backlog does not
grow) and the policy holds. ``steps`` counts the plans
applied until then; an *oscillation* is a plan that reverses the previous one's
direction. Runs that have not converged after ``MAX_STEPS`` plans count as
``MAX_STEPS + 1`` steps and are listed, as do runs still moving after ``RUN_TIMEOUT_S``
(every step costs every policy the same wall-clock time: stabilization, then a window).

Scenarios: under-provisioned (1 or 2 cores) and over-provisioned (12 cores, the most allowed) starts, with 2
state partitions (the policy may not move state). State commits contend for this
machine's disk and do not speed up with more tasks, so they are kept few.
Scale-down is not delayed here (it would only add a wait to every policy alike).

``prediction_error``: after each DS2 step, the batch duration the model predicted for
the new knobs (from the very profile the plan was made from, ``Decision.profile``, at
the batch size then observed) against the median measured under them, as ``|capacity predicted /
capacity measured - 1|`` (capacity = events per batch / batch duration); the median
over steps is reported, the maximum beside it.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_reconf.core.metrics import MetricsStore
from dagster_reconf.core.paths import StreamPaths
from dagster_reconf.core.runtime import StreamRuntime
from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide
from dagster_reconf.core.scaling.knobs import Knobs
from dagster_reconf.core.scaling.policy import POLICIES, PolicyConfig
from dagster_reconf.core.scaling.profile import StreamProfile
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.traces.store import TraceStore
from dagster_reconf.workloads.queries import QUERIES
from dagster_reconf.workloads.streams import bundled_spec

from ._common import emit, median, parse_args

RATE = 250.0  # events/s offered
COST_MICROS = 8000  # simulated I/O per event: about 2 core-seconds of work per second
TRIGGER_S = 2.0  # fixed batch costs are ~0.4 s here: a 2 s interval leaves them a fifth
STATE_PARTITIONS = 2  # few state commits per batch: on this machine they contend for the disk
MAX_STEPS = 3
RUN_TIMEOUT_S = 120.0  # per run (quick: 85 s)
# A new SparkContext starts its Python workers in its first batches: those of the first 10 s are left out.
POLICY = PolicyConfig(window_batches=3, warmup_batches=1, stabilization_s=10, scale_down_delay_s=0,
                      allow_state_migration=False, max_cores=12, utilization_low=0.4)
SCENARIOS = {"under1": 1, "under2": 2, "over": 12}


@dataclass
class Run:
    query: str
    scenario: str
    policy: str
    steps: int = 0
    converged: bool = False
    oscillations: int = 0
    cores: list[int] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    seconds: float = 0.0
    core_seconds: float = 0.0  # cores held x wall-clock time, until converged or the run ended
    kinds: list[str] = field(default_factory=list)  # each applied step's kind (scale_up, scale_down, interval_change, ...)


def spec_for(query: str, cores: int) -> StreamSpec:
    return bundled_spec(f"conv-{query}", query, master=f"local[{cores}]", rate=RATE, source_partitions=cores,
                        state_partitions=STATE_PARTITIONS, trigger_interval_s=TRIGGER_S,
                        max_per_trigger=int(1.5 * RATE * TRIGGER_S), cost={"mode": "sleep", "micros_per_record": COST_MICROS})


def run(query: str, scenario: str, policy_name: str, home: Path, timeout_s: float = RUN_TIMEOUT_S) -> Run:
    """One stream, one policy: decide every second, apply plans, stop when converged or out of steps/time."""
    spec = spec_for(query, SCENARIOS[scenario])
    paths = StreamPaths(home / f"{query}-{scenario}-{policy_name}", spec.name)
    policy = POLICIES[policy_name](POLICY)
    store, traces = MetricsStore(paths.metrics), TraceStore(paths.traces)
    result = Run(query, scenario, policy_name, cores=[SCENARIOS[scenario]])
    runtime = StreamRuntime(spec, paths)
    window, offset, last_direction = ConfigurationWindow(), 0, None
    pending: tuple[StreamProfile, Knobs] | None = None  # DS2's profile before a step, to score its prediction
    started = time.monotonic()
    held_since, cores = started, SCENARIOS[scenario]

    def hold_until(now: float) -> None:  # the cores held since the last step count towards the run's core-seconds
        nonlocal held_since
        result.core_seconds += cores * (now - held_since)
        held_since = now
    try:
        runtime.start()
        while time.monotonic() - started < timeout_s:
            time.sleep(1.0)
            records, offset = store.read(offset)
            window.update(records)

            def activities(lo: float, hi: float):
                traces.ingest(paths.event_log)
                return traces.activities(lo, hi)

            decision = decide(policy, window, time.time(), activities)
            obs = decision.observation
            if obs.batches < POLICY.window_batches:
                continue
            if pending is not None:
                before, knobs = pending
                events = float(window.frame()["events"].iloc[POLICY.warmup_batches:].median())
                predicted_ms = before.batch_ms_for(events, knobs)
                result.errors.append(abs(obs.batch_ms / predicted_ms - 1.0))  # = |capacity predicted / measured - 1|
                print(f"    {query}/{scenario}/{policy_name}: at {knobs.cores} cores, {knobs.trigger_interval_s:g} s: batch of "
                      f"{events:.0f} events predicted {predicted_ms:.0f} ms, measured {obs.batch_ms:.0f} ms "
                      f"(error {result.errors[-1]:.0%})", flush=True)
                pending = None
            keeps_up = obs.backlog_growth <= POLICY.backlog_growth_tolerance * RATE  # no backlog growth
            if decision.action == "hold" and keeps_up:
                result.converged = True
                break
            if not decision.requests_run:
                print(f"    {query}/{scenario}/{policy_name}: {decision.reason[:120]}", flush=True)
                continue
            if result.steps == MAX_STEPS:
                break
            plan = decision.plan
            direction = decision.action
            if last_direction is not None and direction != last_direction:
                result.oscillations += 1
            last_direction = direction
            # Scored against the very profile the plan was made from (settled batches, the machine's CPUs).
            pending = (decision.profile, plan.target) if policy_name == "ds2" and decision.profile is not None else None
            print(f"  {query}/{scenario}/{policy_name}: step {result.steps + 1}: {plan.step.describe()} "
                  f"({decision.reason[:110]})", flush=True)
            hold_until(time.monotonic())
            runtime.restart(plan.target.changes_for(runtime.spec))
            cores = plan.target.cores
            result.steps += 1
            result.cores.append(plan.target.cores)
            result.kinds.append(plan.step.kind)
    finally:
        hold_until(time.monotonic())
        runtime.shutdown(timeout_s=60)
    result.seconds = round(time.monotonic() - started, 1)
    if not result.converged:
        result.steps = MAX_STEPS + 1
    return result


def summarize(runs: list[Run]) -> dict[str, Any]:
    steps = [r.steps for r in runs]
    return {
        "runs": len(runs),
        "converged": sum(r.converged for r in runs),
        "max_steps": max(steps),
        "mean_steps": round(sum(steps) / len(steps), 2),
        "oscillations": sum(r.oscillations for r in runs),
        "core_seconds_median": round(median([r.core_seconds for r in runs]), 1),
        "not_converged": [f"{r.query}/{r.scenario}" for r in runs if not r.converged],
    }


def _case(text: str) -> tuple[str, str]:
    query, _, scenario = text.strip().partition("/")
    if query not in QUERIES or scenario not in SCENARIOS:
        raise SystemExit(f"--cases: {text!r} is not QUERY/SCENARIO with QUERY in {sorted(QUERIES)} and SCENARIO in {sorted(SCENARIOS)}")
    return query, scenario


def main() -> None:
    def add_options(parser):
        parser.add_argument("--cases", default="", help="QUERY/SCENARIO,... instead of the default set, e.g. "
                                                        f"q2/under1,q11/under1 (scenarios: {', '.join(SCENARIOS)})")
        parser.add_argument("--policies", default=",".join(POLICIES), help="POLICY,... to run (default: all; the "
                                                                           "comparisons need ds2 and both baselines)")
        parser.add_argument("--run-timeout-s", type=float, default=None,
                            help=f"wall-clock limit per run (default {RUN_TIMEOUT_S:g} s, quick 85 s); the joins (q3, q8) "
                                 "at 1 core take 14 s per batch, so their first window alone takes a minute: give them 300")

    args = parse_args(__doc__.splitlines()[0], add_options)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if unknown := sorted(set(policies) - set(POLICIES)):
        raise SystemExit(f"--policies: unknown {unknown}; choose from {', '.join(POLICIES)}")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.monotonic()
    if args.cases:
        cases, timeout_s = [_case(c) for c in args.cases.split(",")], RUN_TIMEOUT_S
    elif args.quick:
        cases, timeout_s = [("q5", "under1")], 85.0  # under1: a doubling policy needs two steps
    else:
        # Each step costs a restart, stabilization and a window (~25 s with Python workers warming up), so a
        # 30-minute run holds 4 cases of 3 policies: Q2, Q3, Q8 and Q11 are not in it.
        cases, timeout_s = [("q1", "under1"), ("q5", "under1"), ("wordcount", "under2"), ("q5", "over")], RUN_TIMEOUT_S
    if args.run_timeout_s is not None:
        timeout_s = args.run_timeout_s
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="reconf-conv-") as tmp:
        for query, scenario in cases:
            for policy_name in policies:
                r = run(query, scenario, policy_name, Path(tmp), timeout_s)
                runs.append(r)
                print(f"{query}/{scenario}/{policy_name}: {'converged' if r.converged else 'NOT converged'} in {r.steps} "
                      f"steps, cores {r.cores}, {r.seconds:.0f} s", flush=True)
    errors = [e for r in runs if r.policy == "ds2" for e in r.errors]
    result: dict[str, Any] = {"benchmark": "convergence", "mode": "cases" if args.cases else "quick" if args.quick else "full",
                              "rate": RATE, "cost_micros_per_event": COST_MICROS}
    for name in policies:
        result[name] = summarize([r for r in runs if r.policy == name])
    result["prediction_error"] = round(median(errors), 3) if errors else None
    result["prediction_error_max"] = round(max(errors), 3) if errors else None
    # Per case DS2 can at best tie a baseline that happens to need one step; over the cases it must need fewer.
    if {"ds2", "dhalion", "dynalloc"} <= set(policies):
        result["ds2_fewer_steps_than_both"] = all(
            result["ds2"]["mean_steps"] < result[name]["mean_steps"] for name in ("dhalion", "dynalloc"))
        result["ds2_never_more_steps"] = all(
            ds2.steps <= min(o.steps for o in runs if o.query == ds2.query and o.scenario == ds2.scenario and o.policy != "ds2")
            for ds2 in runs if ds2.policy == "ds2"
        )
    result["runs"] = [{"case": f"{r.query}/{r.scenario}/{r.policy}", "steps": r.steps, "cores": r.cores, "kinds": r.kinds,
                       "core_seconds": round(r.core_seconds, 1)} for r in runs]
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)


if __name__ == "__main__":
    main()
