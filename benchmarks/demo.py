"""The closed loop, headless: does an under-provisioned stream converge through the real daemon?

``python -m benchmarks.demo [--quick]``

Runs :func:`dagster_reconf.workloads.demo.run_demo` (the ``make demo`` loop) on a
fresh home: the scaling sensor, ``dagster-daemon`` and the reconfiguration runs decide
and act; this only reads the outcome. The baseline, in the same run, is the stream's
own first configuration before the loop acted: its backlog growth (events/s, fitted)
against the growth over the last batches once converged (negative: catching up).
``--quick`` bounds the loop at 280 s, a full run at 600 s.

``--repeat N`` runs the loop N times, each on a fresh home, and reports how often it
converges: the share of runs that converged, the distribution of steps, downtime p50
and max over every reconfiguration, lost and duplicated summed, and each run's figures.

``--source kafka`` runs the same loop over a Nexmark topic on a real broker (``make kafka``): the writer offers the
demo's 250 events/s to 4 partitions, the stream reads them through Spark's Kafka source (``kafka_demo_spec``), and the
line adds ``peak_lag`` and ``final_lag`` (consumer lag, events) and ``trigger_events`` (one trigger's worth at the
final interval: the target for ``final_lag``). Once converged, the loop waits (at most 120 s) for the catch-up to
bring the lag under that, so the final lag is the steady state's.

``--source orders`` runs it on a user's own stream through its own code location: ``examples/orders`` (Spark's file
source and file sink, the example's ``workspace.yaml`` and ``orders_scaling_sensor``), started on one core while
order files arrive faster than one core processes them; the definition's oracle checks its output against a batch
job over the same files.

``--handover both`` alternates loops with the handover to a warm standby driver (the
default, ``on``) and without it (``off``: the paused driver restarts its SparkContext),
and reports each side and the ratio of their downtime medians: the baseline in the same run.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from orders_example.streams import OrderWriter

from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.harness.closed_loop import LoopReport, run_closed_loop
from dagster_reconf.harness.timeline import timeline_frame
from dagster_reconf.workloads.demo import DEMO_STREAM, demo_spec, kafka_demo_spec, run_demo
from dagster_reconf.workloads.kafka import KafkaBroker
from dagster_reconf.workloads.nexmark_topic import NexmarkTopicWriter

from ._common import emit, parse_args

WORKSPACE = Path(__file__).resolve().parents[1] / "workspace.yaml"
ORDERS_WORKSPACE = WORKSPACE.parent / "examples" / "orders" / "workspace.yaml"
LAST_BATCHES = 6
ORDERS_SLEEP_MS = 20.0  # per order: 50 orders per file is a second of work
ORDERS_FILES_PER_S = 1.5  # about 1.5 cores of work a second: one core falls behind
ORDERS_TRIGGER_S, ORDERS_MAX_FILES = 2.0, 6  # maxFilesPerTrigger


def orders_loop(tmp: Path, home: Path, timeout_s: float) -> LoopReport:
    """The closed loop over the orders example, through its own code location (the settings through its
    environment, as a user's deployment would set them)."""
    data = tmp / "data"
    env = {
        "ORDERS_DATA": str(data),
        "ORDERS_SLEEP_MS": str(ORDERS_SLEEP_MS),
        "ORDERS_MASTER": "local[1]",
        "ORDERS_TRIGGER_S": str(ORDERS_TRIGGER_S),
        "ORDERS_MAX_FILES": str(ORDERS_MAX_FILES),
    }
    spec = StreamSpec(
        name="orders",
        entrypoint="orders_example.streams:orders",
        master="local[1]",
        state_partitions=4,
        trigger_interval_s=ORDERS_TRIGGER_S,
        max_per_trigger=ORDERS_MAX_FILES,
        options={"input_dir": str(data / "in"), "output_dir": str(data / "out"), "sleep_ms_per_order": ORDERS_SLEEP_MS},
    )
    writer = OrderWriter(data / "in")
    writer.write(2)
    with writer.keep_writing(every_s=1.0 / ORDERS_FILES_PER_S):
        return run_closed_loop(
            home, ORDERS_WORKSPACE, tmp / "out", spec=spec, sensor="orders_scaling_sensor", timeout_s=timeout_s, env=env
        )


def backlog_growth(frame: pd.DataFrame) -> float | None:
    """Events/s the backlog grows by, least squares over ``frame``'s batches (None under 3)."""
    if len(frame) < 3:
        return None
    return round(float(np.polyfit(frame["at"], frame["backlog_events"].astype(float), 1)[0]), 1)


def growth_before_and_after(home: Path, report: LoopReport) -> tuple[float | None, float | None]:
    records, _ = MetricsStore(StreamPaths(home, report.stream).metrics).read(0)
    frame = timeline_frame(records)
    changes = [r["paused_at"] for r in report.reconfigurations if r.get("paused_at")]
    before = frame[frame["at"] < min(changes)] if changes else frame
    return backlog_growth(before.iloc[1:]), backlog_growth(frame.iloc[-LAST_BATCHES:]) if changes else None


def lag_figures(home: Path, report: LoopReport) -> dict[str, Any]:
    """The consumer lag at its highest and at the last batch, and one trigger's worth of events at the last interval
    (the target for the final lag)."""
    records, _ = MetricsStore(StreamPaths(home, report.stream).metrics).read(0)
    frame = timeline_frame(records)
    final = StreamPaths(home, report.stream).spec.read_text()
    interval = float(json.loads(final)["trigger_interval_s"])
    lag = frame["backlog_events"].astype(float)
    return {
        "peak_lag": int(lag.max()) if len(lag) else None,
        "final_lag": int(lag.iloc[-1]) if len(lag) else None,
        "trigger_events": int(demo_spec().options["rate"] * interval),
    }


def one_loop(timeout_s: float, handover: bool = True, source: str = "generator") -> dict[str, Any]:
    """The closed loop once, on a fresh home: its outcome and figures."""
    started = time.monotonic()
    os.environ["RECONF_HANDOVER"] = "1" if handover else "0"  # the code location's streams resource reads it
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="reconf-demo-") as tmp:
        home = Path(tmp) / "home"
        if source == "kafka":
            with KafkaBroker(Path(tmp) / "broker") as broker:
                broker.create_topic("nexmark", partitions=4)
                writer = NexmarkTopicWriter(broker.bootstrap_servers, "nexmark")
                rate = demo_spec().options["rate"]
                metrics = StreamPaths(home, DEMO_STREAM).metrics
                # From the stream's start (its first record): Spark's start-up is not what the loop is measured on.
                with writer.keep_writing(per_second=rate, start_when=metrics.is_file):
                    spec = kafka_demo_spec(broker.bootstrap_servers, "nexmark")
                    report = run_demo(
                        home, WORKSPACE, Path(tmp) / "out", timeout_s=timeout_s, spec=spec, drain_at_rate=rate
                    )
                extra = lag_figures(home, report)
        elif source == "orders":
            report = orders_loop(Path(tmp), home, timeout_s)
        else:
            report = run_demo(home, WORKSPACE, Path(tmp) / "out", timeout_s=timeout_s)
        before, after = growth_before_and_after(home, report)
    return {
        "source": source,
        **extra,
        "handover": handover,
        "converged": report.converged,
        "steps": report.steps,
        "seconds_to_converge": report.seconds_to_converge,
        "lost": report.lost,
        "duplicated": report.duplicated,
        "rate": ORDERS_FILES_PER_S * (OrderWriter.ROWS + 1) if source == "orders" else demo_spec().options["rate"],
        "backlog_growth_unmanaged_per_s": before,
        "backlog_growth_converged_per_s": after,
        "reconfigurations": [
            {
                k: r.get(k)
                for k in (
                    "outcome",
                    "cores",
                    "state_partitions",
                    "downtime_s",
                    "catch_up_s",
                    "verified",
                    "handed_over",
                    "step_seconds",
                )
            }
            for r in report.reconfigurations
        ],
        "runs": [f"{r['job']}:{r['status']}" for r in report.runs],
        "wall_s": round(time.monotonic() - started, 1),
    }


def summarize(loops: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the loop converged, in how many steps, with what downtime, and whether it lost or duplicated."""
    downtimes = [r["downtime_s"] for loop in loops for r in loop["reconfigurations"] if r.get("downtime_s") is not None]
    return {
        "repeat": len(loops),
        "converged_share": round(sum(bool(loop["converged"]) for loop in loops) / len(loops), 3),
        "steps": {str(k): v for k, v in sorted(Counter(loop["steps"] for loop in loops).items())},
        "downtime_s_p50": round(float(np.median(downtimes)), 1) if downtimes else 0.0,
        "downtime_s_max": round(max(downtimes), 1) if downtimes else 0.0,
        "reconfigurations": len(downtimes),
        "lost": sum(loop["lost"] or 0 for loop in loops),
        "duplicated": sum(loop["duplicated"] or 0 for loop in loops),
        "not_checked": sum(loop["lost"] is None or loop["duplicated"] is None for loop in loops),
    }


def main() -> None:
    def add_options(parser):
        parser.add_argument(
            "--repeat",
            type=int,
            default=1,
            help="run the loop N times (each on a fresh home) and report the share that converged",
        )
        parser.add_argument(
            "--handover",
            choices=("on", "off", "both"),
            default="on",
            help="hand the stream to a warm standby driver (on), restart the SparkContext in the paused "
            "driver (off), or alternate and compare (both)",
        )
        parser.add_argument(
            "--source",
            choices=("generator", "kafka", "orders"),
            default="generator",
            help="the bundled generator (default), a Nexmark topic on a real Kafka broker (make kafka), or a user's "
            "own file stream through its own code location (examples/orders)",
        )

    args = parse_args(__doc__.splitlines()[0], add_options)
    if args.repeat < 1:
        raise SystemExit(f"--repeat {args.repeat}: give a number of runs, 1 or more")
    timeout_s = 280.0 if args.quick else 600.0
    started = time.monotonic()
    runs = args.repeat * (2 if args.handover == "both" else 1)
    loops = []
    for n in range(runs):
        handover = args.handover == "on" or (args.handover == "both" and n % 2 == 0)
        loops.append(one_loop(timeout_s, handover, args.source))
        if runs > 1:
            print(
                f"loop {n + 1}/{runs} (handover {'on' if handover else 'off'}): "
                f"{'converged' if loops[-1]['converged'] else 'NOT converged'} in {loops[-1]['steps']} steps; "
                f"downtime {[r['downtime_s'] for r in loops[-1]['reconfigurations']]}",
                flush=True,
            )
    mode = {"benchmark": "demo", "mode": "quick" if args.quick else "full", "handover": args.handover}
    mode["source"] = args.source
    if args.handover == "both":
        with_handover = summarize([loop for loop in loops if loop["handover"]])
        restarting = summarize([loop for loop in loops if not loop["handover"]])
        ratio = (
            round(with_handover["downtime_s_p50"] / restarting["downtime_s_p50"], 3)
            if restarting["downtime_s_p50"]
            else 0.0
        )
        emit(
            {
                **mode,
                "downtime_p50_ratio_handover_vs_restart": ratio,
                "handover_on": with_handover,
                "handover_off": restarting,
                "loops": loops,
                "wall_s": round(time.monotonic() - started, 1),
            }
        )
    elif runs == 1:
        emit({**mode, **loops[0]})
    else:
        emit({**mode, **summarize(loops), "loops": loops, "wall_s": round(time.monotonic() - started, 1)})


if __name__ == "__main__":
    main()
