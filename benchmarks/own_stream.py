"""DS2 on users' own streams: started under- and over-provisioned, is each right-sized, in how many steps?

``python -m benchmarks.own_stream [--quick] [--workloads rate,orders,customers,kafka] [--minimum rate=3,...]``

Each workload is a stream of ``examples/`` (a user's code through the public API, nothing bundled) under a steady load
whose every event pays a simulated cost, so capacity grows with task slots past this machine's CPUs:

* ``rate``: ``examples.rate_windows``, Spark's rate source, a windowed count with a watermark, the file sink;
* ``orders``: ``orders_example`` (``examples/orders``), JSON files, deduplication within a watermark, windowed totals,
  the file sink;
* ``customers``: ``examples.customer_totals``, the same files through an ``applyInPandasWithState`` state function
  (the cost is paid inside it: the stateful stage does the work), the file sink;
* ``kafka``: ``examples.kafka_clicks``, a topic of 4 partitions on a real broker (``make kafka``), first click per
  user over all time, the file sink.

The ``orders`` workload also starts ``capped``: on the swept minimum's cores and interval, its ``max_per_trigger``
(the file source's ``maxFilesPerTrigger``) one file a batch of the 1.5 a second arriving: behind because of its cap,
not its cores. DS2 must read the cap that binds and raise it, not add cores or lengthen the trigger; its targets are
the other cases'.

Per workload, in a process of its own (the Kafka connector needs its JVM's classpath): the fewest cores that sustain
its load with the headroom the policy keeps (batches within its target utilization, 70 % of the interval: what DS2
plans for, so what right-sized means to its user) are swept (``_right_sizing.minimum_configuration``: a binary
search, a fresh stream per probe; ``minimum_utilization`` in the JSON), then the
stream starts on 1 core (``under``) and on 8 (``over``), and DS2 decides every second exactly as the scaling sensor
does; each plan is applied by restarting the stream with its knobs (``_right_sizing.run_policy``), until it holds
right-sized, or after 3 steps. Then the load stops, the stream reads what is left, and the definition's own oracle
checks its output (``lost``, ``duplicated``).

Per case: ``steps``, ``final_cores`` against the swept ``minimum_cores`` (``final_over_minimum``), ``oscillations``,
DS2's ``prediction_error`` (each step's first full window against the prediction from the profile the plan came from,
median over the case's steps; ``null`` with ``predictions_scored`` 0 where no step was scored), ``lost`` and
``duplicated``. The baseline in the same run is the sweep: what the fewest cores are, measured, not modelled.
``targets`` says whether each of the issue's targets holds over the cases: final cores at most 1.25x the minimum
(rounded up to whole cores: 3 on a minimum of 2), at most 2 steps, no oscillation, prediction error median at most
10 % and max at most 15 %, nothing lost or duplicated. The minimum is a configuration, cores at a trigger interval:
one that falls behind at 2 s is probed again at 4 s (a file source's tasks are its files, so only a longer interval
gives more cores work). ``--quick``: the ``rate`` workload alone, swept over 1-4 cores, started on 1 and on 4.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ContextManager

from orders_example.streams import OrderWriter

from dagster_reconf.core.definition import load_definition
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.harness.oracle import check_with_oracle

from ._common import emit, median, parse_args
from ._right_sizing import (
    MAX_STEPS,
    POLICY,
    TRIGGER_S,
    Minimum,
    Run,
    Workload,
    minimum_configuration,
    right_sized_bound,
    run_policy,
)

WORKLOADS = ("rate", "orders", "customers", "kafka")
UNDER, OVER, QUICK_OVER = 1, 8, 4  # starting cores
SWEEP_MAX, QUICK_SWEEP_MAX = 8, 4
RUN_TIMEOUT_S, QUICK_RUN_TIMEOUT_S = 130.0, 100.0
DRAIN_S = 90.0  # once the load stops, at most this long to read what is left before the oracle
TARGET_STEPS, TARGET_ERROR_MEDIAN, TARGET_ERROR_MAX = 2, 0.10, 0.15
# The capped case: the workload on its minimum's cores and interval, its cap one file a batch (of 1.5 arriving a
# second): behind because of its cap, not its cores.
CAPPED = {"orders": 1}


def rate_workload() -> Workload:
    """60 events/s at 20 ms each: 1.2 cores' worth of work, spread over the rate source's partitions."""

    def spec_for(data: Path, cores: int, trigger_s: float) -> StreamSpec:
        return StreamSpec(
            name="rate-windows",
            entrypoint="examples.rate_windows.streams:window_counts",
            master=f"local[{cores}]",
            source_partitions=cores,
            state_partitions=2,
            trigger_interval_s=trigger_s,
            options={"rows_per_second": 60, "output_dir": str(data / "out"), "work_ms_per_event": 20.0},
        )

    return Workload("rate", 60.0, spec_for)


def order_files(files_per_s: float) -> Callable[[Path], ContextManager[OrderWriter]]:
    """Order files into ``data/in``, ``files_per_s`` a second (two at once first, so the first batch has input)."""

    @contextlib.contextmanager
    def feed(data: Path) -> Iterator[OrderWriter]:
        writer = OrderWriter(data / "in")
        writer.write(2)
        with writer.keep_writing(every_s=1.0 / files_per_s):
            yield writer

    return feed


def order_files_workload(
    name: str, stream: str, entrypoint: str, files_per_s: float, state_partitions: int, options: dict[str, float]
) -> Workload:
    """Workload ``name``: the stream ``entrypoint`` over the order files (``data/in`` in, ``data/out`` out),
    ``files_per_s`` arriving."""

    def spec_for(data: Path, cores: int, trigger_s: float) -> StreamSpec:
        return StreamSpec(
            name=stream,
            entrypoint=entrypoint,
            master=f"local[{cores}]",
            state_partitions=state_partitions,
            trigger_interval_s=trigger_s,
            max_per_trigger=6,  # maxFilesPerTrigger
            options={"input_dir": str(data / "in"), "output_dir": str(data / "out"), **options},
        )

    return Workload(name, files_per_s * (OrderWriter.ROWS + 1), spec_for, order_files(files_per_s))


def orders_workload() -> Workload:
    """1.5 files a second of 51 orders at 10 ms each: 0.77 cores' worth in the file scan, half a second per file (a
    task each: a 2 s batch of 3 files has 3 tasks, whatever the cores)."""
    return order_files_workload(
        "orders", "orders", "orders_example.streams:orders", 1.5, 4, {"sleep_ms_per_order": 10.0}
    )


def customers_workload() -> Workload:
    """The same order files, one every 2 s, 40 ms per order inside the state function: one core's worth in 4 state
    tasks (few customers per batch: the state function's own Python CPU, per customer, does not grow with cores)."""
    return order_files_workload(
        "customers",
        "customer-totals",
        "examples.customer_totals.streams:customer_totals",
        0.5,
        4,
        {"work_ms_per_order": 40.0},
    )


def kafka_workload(broker: Any) -> Workload:
    """150 clicks/s at 12 ms each on a topic of 4 partitions (a topic per stream): about 1.8 cores' worth."""
    from dagster_reconf.workloads.kafka import spark_kafka_jars
    from examples.kafka_clicks.streams import ClickProducer

    rate = 150

    def topic(data: Path) -> str:
        return f"clicks-{data.parent.name}-{data.name}"

    def spec_for(data: Path, cores: int, trigger_s: float) -> StreamSpec:
        return StreamSpec(
            name="first-clicks",
            entrypoint="examples.kafka_clicks.streams:first_clicks",
            master=f"local[{cores}]",
            source_partitions=max(cores, 4),
            state_partitions=4,
            trigger_interval_s=trigger_s,
            max_per_trigger=int(1.5 * rate * trigger_s),
            spark_conf={"spark.jars": spark_kafka_jars()},
            kafka={"bootstrap_servers": broker.bootstrap_servers},
            options={
                "bootstrap_servers": broker.bootstrap_servers,
                "topic": topic(data),
                "output_dir": str(data / "out"),
                "work_ms_per_click": 12.0,
            },
        )

    @contextlib.contextmanager
    def clicks(data: Path) -> Iterator[Any]:
        broker.create_topic(topic(data), partitions=4)
        with ClickProducer(broker.bootstrap_servers, topic(data)).keep_writing(per_second=rate) as producer:
            yield producer

    return Workload("kafka", float(rate), spec_for, clicks)


def capped(workload: Workload, cap: int) -> Workload:
    """``workload`` with its batches capped at ``cap`` (the max_per_trigger knob, in the source's unit)."""

    def spec_for(data: Path, cores: int, trigger_s: float) -> StreamSpec:
        return workload.spec_for(data, cores, trigger_s).with_changes({"max_per_trigger": cap})

    return dataclasses.replace(workload, spec_for=spec_for)


@dataclass(frozen=True)
class Case:
    """One start of one workload, as the JSON line reports it."""

    case: str
    converged: bool
    steps: int
    cores: list[int]
    final_cores: int
    minimum_cores: int
    final_over_minimum: float
    prediction_error: float | None  # None: no step was scored (predictions_scored 0)
    prediction_error_max: float | None
    predictions_scored: int
    oscillations: int
    lost: int | None
    duplicated: int | None
    seconds: float


def case_of(run: Run) -> Case:
    """The run's figures, its output checked by the stream definition's oracle."""
    lost = duplicated = None
    oracle = load_definition(run.final_spec.entrypoint).oracle if run.final_spec else None
    if oracle is not None and run.home is not None:
        checked = check_with_oracle(oracle, run.home / "home", run.final_spec)
        lost, duplicated = checked.lost, checked.duplicated
        print(f"    {run.case}: oracle: {checked}", flush=True)
    return Case(
        case=run.case,
        converged=run.converged,
        steps=run.steps,
        cores=run.cores,
        final_cores=run.cores[-1],
        minimum_cores=run.minimum,
        final_over_minimum=round(run.cores[-1] / run.minimum, 2),
        prediction_error=round(median(run.errors), 3) if run.errors else None,
        prediction_error_max=round(max(run.errors), 3) if run.errors else None,
        predictions_scored=len(run.errors),
        oscillations=run.oscillations,
        lost=lost,
        duplicated=duplicated,
        seconds=run.seconds,
    )


def one_workload(name: str, quick: bool, minimum: Minimum | None) -> dict[str, Any]:
    """Sweep the workload's minimum (unless given), then run it from each start: its cases, as JSON."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"reconf-own-{name}-")))
        if name == "kafka":
            from dagster_reconf.workloads.kafka import KafkaBroker

            workload = kafka_workload(stack.enter_context(KafkaBroker(tmp / "broker")))
        else:
            workload = {"rate": rate_workload, "orders": orders_workload, "customers": customers_workload}[name]()
        swept = minimum is None
        if minimum is None:
            upper = QUICK_SWEEP_MAX if quick else SWEEP_MAX
            minimum = minimum_configuration(
                workload,
                tmp,
                upper,
                longer_trigger=not quick,
                utilization=POLICY.utilization_target,
                retry=("overruns", "behind"),
            )
        print(f"{name}: minimum that sustains {workload.rate:g} events/s: {minimum}", flush=True)
        cases = []
        starts = [("under", UNDER, workload, TRIGGER_S), ("over", QUICK_OVER if quick else OVER, workload, TRIGGER_S)]
        if name in CAPPED:  # enough cores, too low a cap: under-provisioned by its cap
            starts.append(("capped", minimum.cores, capped(workload, CAPPED[name]), minimum.trigger_s))
        for start, cores, started, trigger_s in starts:
            run = run_policy(
                started,
                f"{name}/{start}{cores}",
                cores,
                "ds2",
                tmp,
                QUICK_RUN_TIMEOUT_S if quick else RUN_TIMEOUT_S,
                minimum,
                trigger_s=trigger_s,
                drain_s=DRAIN_S,
            )
            cases.append(asdict(case_of(run)))
            print(f"{name}/{start}{cores}: {cases[-1]}", flush=True)
    return {"workload": name, "minimum": asdict(minimum), "minimum_swept": swept, "cases": cases}


def targets(cases: list[dict[str, Any]]) -> dict[str, bool]:
    """The issue's targets over every case."""
    errors = [c["prediction_error"] for c in cases if c["prediction_error"] is not None]
    worst = [c["prediction_error_max"] for c in cases if c["prediction_error_max"] is not None]
    return {
        "right_sized": all(c["converged"] and c["final_cores"] <= right_sized_bound(c["minimum_cores"]) for c in cases),
        "steps": all(c["steps"] <= TARGET_STEPS for c in cases),
        "no_oscillation": all(c["oscillations"] == 0 for c in cases),
        "prediction_error_median": bool(errors) and median(errors) <= TARGET_ERROR_MEDIAN,
        "prediction_error_max": bool(worst) and max(worst) <= TARGET_ERROR_MAX,
        "nothing_lost_or_duplicated": all(c["lost"] == 0 and c["duplicated"] == 0 for c in cases),
    }


def child(name: str, quick: bool, minimum: Minimum | None) -> dict[str, Any]:
    """One workload in a process of its own; its result is the process's last line."""
    command = [sys.executable, "-m", "benchmarks.own_stream", "--workload-only", name]
    command += ["--quick"] if quick else []
    command += ["--minimum", f"{name}={minimum.cores}@{minimum.trigger_s:g}"] if minimum else []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        lines = []
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    if process.returncode != 0 or not lines:
        raise SystemExit(f"own_stream: workload {name} failed (exit {process.returncode}); its output is above")
    return json.loads(lines[-1])


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workloads",
        default="",
        help=f"WORKLOAD,... of {', '.join(WORKLOADS)} (default: all; quick: rate)",
    )
    parser.add_argument(
        "--minimum",
        default="",
        help="WORKLOAD=CORES[@TRIGGER_S],... minima measured before (skips their sweep; the JSON says which)",
    )
    parser.add_argument("--workload-only", default=None, help=argparse.SUPPRESS)  # a child process: one workload


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], _options)
    given = {}
    for item in filter(None, (part.strip() for part in args.minimum.split(","))):
        name, _, value = item.partition("=")
        if name not in WORKLOADS:
            raise SystemExit(f"--minimum: {item!r}: {name!r} is not one of {', '.join(WORKLOADS)}")
        given[name] = Minimum.parse(value)
    if args.workload_only:
        emit(one_workload(args.workload_only, args.quick, given.get(args.workload_only)))
        return
    chosen = [w.strip() for w in (args.workloads or ("rate" if args.quick else ",".join(WORKLOADS))).split(",")]
    if unknown := [w for w in chosen if w not in WORKLOADS]:
        raise SystemExit(f"--workloads: unknown {unknown}; choose from {', '.join(WORKLOADS)}")
    started = time.monotonic()
    results = [child(name, args.quick, given.get(name)) for name in chosen]
    cases = [case for result in results for case in result["cases"]]
    errors = [c["prediction_error"] for c in cases if c["prediction_error"] is not None]
    emit(
        {
            "benchmark": "own_stream",
            "mode": "quick" if args.quick else "full",
            "policy": "ds2",
            "max_steps": MAX_STEPS,
            "minimum_utilization": POLICY.utilization_target,
            "minimum": {r["workload"]: r["minimum"] for r in results},
            "minimum_given": sorted(r["workload"] for r in results if not r["minimum_swept"]),
            "cases": cases,
            "prediction_error_median": round(median(errors), 3) if errors else None,
            "prediction_error_max": max(
                (c["prediction_error_max"] for c in cases if c["prediction_error_max"] is not None), default=None
            ),
            "predictions_scored": sum(c["predictions_scored"] for c in cases),
            "lost": sum(c["lost"] or 0 for c in cases),
            "duplicated": sum(c["duplicated"] or 0 for c in cases),
            "targets": targets(cases),
            "wall_s": round(time.monotonic() - started, 1),
        }
    )


if __name__ == "__main__":
    main()
