"""Steps until a stream sustains its rate: DS2 against Dhalion and dynamic allocation.

``python -m benchmarks.convergence [--quick]``

Each run starts a real stream (in-process driver, local mode) at a fixed rate with a per-record cost
of simulated I/O (``sleep``), so capacity grows with task slots beyond this machine's 2 cores. A
policy watches it exactly as the scaling sensor does (the configuration window over the metrics
store, traces from the event logs), and each plan it makes is applied by restarting the stream with
the plan's knobs. A run has *converged* when, on a full metric window, the stream keeps up (its
backlog does not grow), the policy holds, and it is right-sized: on at most 1.25x the fewest cores
that sustain the rate (rounded up). That minimum is measured in the same run, per query, before the
policies run: a binary search over the cores, a fresh stream per probe, each probe judged from a full
settled window on (its backlog gone, with batches within the interval; one still shrinking is watched
for the catch-up time, not extrapolated from one window). A probe that keeps pace only by running
its batches past the 2 s interval is probed again at ``LONGER_TRIGGER_S``, where the batches' fixed
costs weigh less (DS2 lengthens the interval for the same reason): the minimum is a configuration,
cores and trigger interval, and the load step starts on it. ``--quick`` sweeps at 2 s alone. A
policy that never scales down no longer converges from an over-provisioned start.
``core_seconds``: the cores held times the wall-clock time until the run converged (or ended);
``kinds``: each applied step's kind. ``steps`` counts the plans applied until then; an *oscillation*
is a plan that reverses the previous one's direction. Runs that have not converged after
``MAX_STEPS`` plans count as ``MAX_STEPS + 1`` steps and are listed, as do runs still moving after
``RUN_TIMEOUT_S`` (every step costs every policy the same wall-clock time: stabilization, then a
window).

Scenarios: under-provisioned (1 or 2 cores) and over-provisioned (8 or 12 cores, 12 the most
allowed) starts, and a load step: a start on the minimum, the rate doubled ``STEP_UP_S`` after the
stream began and halved back at ``STEP_DOWN_S`` (the generator's ``rate_steps``); it converges only
once it holds right-sized after the halving, and a step the load reversed is not an oscillation. All
with 2 state partitions (the policy may not move state). State commits contend for this machine's
disk and do not speed up with more tasks, so they are kept few. Scale-down is not delayed here (it
would only add a wait to every policy alike).

``prediction_error``: after each DS2 step, each batch's duration in the first full window under the
new knobs against what the model predicted for its events (from the very profile the plan was made
from, ``Decision.profile``: a window after a step mixes catch-up batches at the cap with steady
ones), as ``|median(measured / predicted) - 1|`` (= |capacity predicted / capacity measured - 1|,
capacity = events per batch / batch duration); the median over steps is reported, the maximum
beside it. Where one configuration could not tell waiting from CPU queueing, a Python stage's CPU per
task from its CPU per event, or how tasks that share CPUs interleave (Brent's bound), the plan gave a
band (``StreamProfile.batch_ms_band``): ``prediction_band_error_max`` is how far a measured batch fell
outside it (0 inside).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from dagster_reconf.core.scaling.policies import POLICIES
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.workloads.queries import QUERIES
from dagster_reconf.workloads.streams import bundled_spec

from ._common import emit, median, parse_args
from ._right_sizing import POLICY, TRIGGER_S, Minimum, Run, Workload, minimum_configuration, run_policy

RATE = 250.0  # events/s offered
COST_MICROS = 8000  # simulated I/O per event: about 2 core-seconds of work per second
STATE_PARTITIONS = 2  # few state commits per batch: on this machine they contend for the disk
RUN_TIMEOUT_S = 120.0  # per run (quick: 110 s)
# Starting cores per scenario; "step" starts right-sized (on the minimum) and its rate doubles, then halves.
SCENARIOS = {"under1": 1, "under2": 2, "over8": 8, "over12": 12, "step": 0}
STEP_UP_S, STEP_DOWN_S = 40.0, 140.0  # seconds after the stream began: RATE -> 2 x RATE -> RATE
STEP_RUN_TIMEOUT_S = 260.0


def workload(query: str, rate_steps: str | None = None) -> Workload:
    """A bundled query at RATE (or under ``rate_steps``), its generator built in."""

    def spec_for(data: Path, cores: int, trigger_s: float) -> StreamSpec:
        return bundled_spec(
            f"conv-{query}",
            query,
            master=f"local[{cores}]",
            rate=RATE,
            rate_steps=rate_steps,
            source_partitions=cores,
            state_partitions=STATE_PARTITIONS,
            trigger_interval_s=trigger_s,
            max_per_trigger=int(1.5 * RATE * trigger_s),
            cost={"mode": "sleep", "micros_per_record": COST_MICROS},
        )

    return Workload(query, RATE, spec_for)


def load_phase(scenario: str, elapsed_s: float) -> int:
    """Which load a run is in: 0 at RATE; in the step scenario 1 at twice RATE, 2 back at RATE."""
    return sum(elapsed_s >= t for t in (STEP_UP_S, STEP_DOWN_S)) if scenario == "step" else 0


def run(query: str, scenario: str, policy_name: str, home: Path, timeout_s: float, minimum: Minimum) -> Run:
    """One query, one scenario, one policy (``_right_sizing.run_policy``); the load step starts on the minimum."""
    steps = f"{STEP_UP_S:g}:{2 * RATE:g},{STEP_DOWN_S:g}:{RATE:g}" if scenario == "step" else None
    return run_policy(
        workload(query, steps),
        f"{query}/{scenario}",
        SCENARIOS[scenario] or minimum.cores,
        policy_name,
        home,
        timeout_s,
        minimum,
        trigger_s=minimum.trigger_s if scenario == "step" else TRIGGER_S,
        load_phase=lambda elapsed_s: load_phase(scenario, elapsed_s),
        final_phase=2 if scenario == "step" else 0,
    )


def summarize(runs: list[Run]) -> dict[str, Any]:
    steps = [r.steps for r in runs]
    return {
        "runs": len(runs),
        "converged": sum(r.converged for r in runs),
        "max_steps": max(steps),
        "mean_steps": round(sum(steps) / len(steps), 2),
        "oscillations": sum(r.oscillations for r in runs),
        "core_seconds_median": round(median([r.core_seconds for r in runs]), 1),
        "final_over_minimum_median": round(median([r.cores[-1] / r.minimum for r in runs]), 2),
        "final_over_minimum_max": round(max(r.cores[-1] / r.minimum for r in runs), 2),
        "not_converged": [r.case for r in runs if not r.converged],
    }


def _case(text: str) -> tuple[str, str]:
    query, _, scenario = text.strip().partition("/")
    if query not in QUERIES or scenario not in SCENARIOS:
        raise SystemExit(
            f"--cases: {text!r} is not QUERY/SCENARIO with QUERY in {sorted(QUERIES)} "
            f"and SCENARIO in {sorted(SCENARIOS)}"
        )
    return query, scenario


def main() -> None:
    def add_options(parser):
        parser.add_argument(
            "--cases",
            default="",
            help="QUERY/SCENARIO,... instead of the default set, e.g. "
            f"q2/under1,q11/under1 (scenarios: {', '.join(SCENARIOS)})",
        )
        parser.add_argument(
            "--policies",
            default=None,
            help="POLICY,... to run (default: all; quick: ds2 alone, beside the "
            "minimum's sweep in 5 minutes; the comparisons need ds2 "
            "and both baselines)",
        )
        parser.add_argument(
            "--minimum",
            default="",
            help="QUERY=CORES[@TRIGGER_S],... minima measured before (skips "
            "their sweep; the JSON says which were given)",
        )
        parser.add_argument(
            "--keep",
            type=Path,
            default=None,
            metavar="DIR",
            help="run under DIR and keep it (each run's metrics, event logs and traces, to replay a "
            "decision) instead of a temporary folder",
        )
        parser.add_argument(
            "--run-timeout-s",
            type=float,
            default=None,
            help=f"wall-clock limit per run (default {RUN_TIMEOUT_S:g} s, quick 110 s); the joins (q3, q8) "
            "at 1 core take 14 s per batch, so their first window alone takes a minute: give them 300",
        )

    args = parse_args(__doc__.splitlines()[0], add_options)
    chosen = args.policies or ("ds2" if args.quick and not args.cases else ",".join(POLICIES))
    policies = [p.strip() for p in chosen.split(",") if p.strip()]
    if unknown := sorted(set(policies) - set(POLICIES)):
        raise SystemExit(f"--policies: unknown {unknown}; choose from {', '.join(POLICIES)}")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.monotonic()
    if args.cases:
        cases, timeout_s = [_case(c) for c in args.cases.split(",")], RUN_TIMEOUT_S
    elif args.quick:
        # DS2 alone, against the minimum measured in the same run: a run needs ~100 s (a step, then the new
        # SparkContext's Python workers warm up for 10-15 s before a full window), and the sweep ~2 minutes.
        cases, timeout_s = [("q5", "under1")], 110.0
        sweep_max = 6  # three probes instead of four (Q5 needs fewer: see the README)
    else:
        # Each step costs a restart, stabilization and a window (~25 s with Python workers warming up), and each
        # query its minimum's sweep (~2.5 min), so a 30-minute run holds one query's three kinds of start under the
        # three policies: under-provisioned, over-provisioned and the load step (4 minutes a policy). The other
        # queries run with --cases (the README lists their results).
        cases, timeout_s = [("q5", "under1"), ("q5", "over12"), ("q5", "step")], RUN_TIMEOUT_S
    if args.run_timeout_s is not None:
        timeout_s = args.run_timeout_s
    if not args.quick:
        sweep_max = POLICY.max_cores
    runs: list[Run] = []
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.nullcontext(str(args.keep))
        if args.keep is not None
        else tempfile.TemporaryDirectory(prefix="reconf-conv-") as tmp
    ):
        given = {
            q: Minimum.parse(n) for q, _, n in (item.partition("=") for item in args.minimum.split(",") if item.strip())
        }
        minima = {
            query: given.get(query)
            or minimum_configuration(workload(query), Path(tmp), sweep_max, longer_trigger=not args.quick)
            for query in dict.fromkeys(q for q, _ in cases)
        }
        print(
            f"minimum that sustains {RATE:g} events/s: " + ", ".join(f"{q} {m}" for q, m in minima.items()), flush=True
        )
        for query, scenario in cases:
            for policy_name in policies:
                limit = max(timeout_s, STEP_RUN_TIMEOUT_S) if scenario == "step" else timeout_s
                r = run(query, scenario, policy_name, Path(tmp), limit, minima[query])
                runs.append(r)
                print(
                    f"{query}/{scenario}/{policy_name}: {'converged' if r.converged else 'NOT converged'} in {r.steps} "
                    f"steps, cores {r.cores}, {r.seconds:.0f} s",
                    flush=True,
                )
    errors = [e for r in runs if r.policy == "ds2" for e in r.errors]
    result: dict[str, Any] = {
        "benchmark": "convergence",
        "mode": "cases" if args.cases else "quick" if args.quick else "full",
        "rate": RATE,
        "cost_micros_per_event": COST_MICROS,
    }
    for name in policies:
        result[name] = summarize([r for r in runs if r.policy == name])
    band_errors = [e for r in runs if r.policy == "ds2" for e in r.band_errors]
    # Numbers always: 0 where no DS2 step was scored (predictions_scored says so), e.g. over-provisioned starts alone.
    result["predictions_scored"] = len(errors)
    result["prediction_error"] = round(median(errors), 3) if errors else 0.0
    result["prediction_error_max"] = round(max(errors), 3) if errors else 0.0
    result["prediction_band_error_max"] = round(max(band_errors), 3) if band_errors else 0.0
    # Per case DS2 can at best tie a baseline that happens to need one step; over the cases it must need fewer.
    if {"ds2", "dhalion", "dynalloc"} <= set(policies):
        result["ds2_fewer_steps_than_both"] = all(
            result["ds2"]["mean_steps"] < result[name]["mean_steps"] for name in ("dhalion", "dynalloc")
        )
        result["ds2_never_more_steps"] = all(
            ds2.steps <= min(o.steps for o in runs if o.case == ds2.case and o.policy != "ds2")
            for ds2 in runs
            if ds2.policy == "ds2"
        )
    result["minimum_cores"] = {q: m.cores for q, m in minima.items()}
    result["minimum_trigger_s"] = {q: m.trigger_s for q, m in minima.items()}
    result["minimum_given"] = sorted(set(given) & set(minima))
    result["runs"] = [
        {
            "case": f"{r.case}/{r.policy}",
            "steps": r.steps,
            "cores": r.cores,
            "kinds": r.kinds,
            "core_seconds": round(r.core_seconds, 1),
        }
        for r in runs
    ]
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)


if __name__ == "__main__":
    main()
