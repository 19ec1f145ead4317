"""``make demo``: the closed control loop on the bundled Nexmark Q5 stream, through the real Dagster daemon.

``python -m dagster_reconf.workloads.demo [--timeout-s S] [--out DIR]``

An under-provisioned Q5 stream runs in its own driver at a rate it cannot sustain; the
reference code location's scaling sensor (``workspace.yaml``) plans and the runs migrate
it until it keeps up (see :mod:`dagster_reconf.harness.closed_loop`). The output is
checked against the batch oracle, and a report and a timeline PNG are written.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.harness.closed_loop import LoopReport, run_closed_loop
from dagster_reconf.workloads.streams import bundled_spec

__all__ = ["DEMO_SENSOR", "DEMO_STREAM", "demo_spec", "kafka_demo_spec", "run_demo"]

DEMO_STREAM = "nexmark-q5"
DEMO_SENSOR = "nexmark_q5_scaling_sensor"


def demo_spec(name: str = DEMO_STREAM) -> StreamSpec:
    """Q5 on one core at 250 events/s, each event paying 8 ms of simulated I/O: about 2
    core-seconds of work a second, so it falls behind, and capacity grows with task slots
    beyond this machine's cores (the work waits rather than computes)."""
    return bundled_spec(
        name,
        "q5",
        master="local[1]",
        rate=250,
        source_partitions=1,
        state_partitions=2,
        trigger_interval_s=2.0,
        max_per_trigger=750,
        cost={"mode": "sleep", "micros_per_record": 8000},
    )


def kafka_demo_spec(bootstrap_servers: str, topic: str, name: str = DEMO_STREAM) -> StreamSpec:
    """:func:`demo_spec`'s load over a Nexmark topic (the writer offers its 250 events/s): the same Q5 and cost, read
    through Spark's Kafka source, ``maxOffsetsPerTrigger`` for the batch cap, ``minPartitions`` at the topic's 4.
    Two cores, about half what the load needs: the backlog it leaves until the first plan lands is what the planned
    cores then clear, and on one core that alone outlasts a quick run."""
    from dagster_reconf.workloads.kafka import spark_kafka_jars

    return StreamSpec(
        name=name,
        entrypoint="dagster_reconf.workloads.nexmark_topic:q5",
        master="local[2]",
        source_partitions=4,
        state_partitions=2,
        trigger_interval_s=2.0,
        max_per_trigger=750,
        spark_conf={"spark.jars": spark_kafka_jars()},
        kafka={"bootstrap_servers": bootstrap_servers},
        options={
            "bootstrap_servers": bootstrap_servers,
            "topic": topic,
            "cost": {"mode": "sleep", "micros_per_record": 8000},
        },
    )


def run_demo(
    home: Path,
    workspace: Path,
    out: Path,
    timeout_s: float = 480.0,
    spec: StreamSpec | None = None,
    drain_at_rate: float | None = None,
) -> LoopReport:
    """The closed loop on ``spec`` (default :func:`demo_spec`) with the reference location's scaling sensor
    (``drain_at_rate``: see :func:`~dagster_reconf.harness.closed_loop.run_closed_loop`)."""
    return run_closed_loop(
        home,
        workspace,
        out,
        spec=spec or demo_spec(),
        sensor=DEMO_SENSOR,
        timeout_s=timeout_s,
        drain_at_rate=drain_at_rate,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dagster_reconf.workloads.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=Path(os.environ.get("RECONF_HOME", ".reconf")),
        help="runtime home (default .reconf)",
    )
    parser.add_argument(
        "--workspace", type=Path, default=Path("workspace.yaml"), help="Dagster workspace (default workspace.yaml)"
    )
    parser.add_argument("--out", type=Path, default=None, help="report and timeline folder (default HOME/closed-loop)")
    parser.add_argument(
        "--timeout-s", type=float, default=480.0, help="give up converging after this long (default 480)"
    )
    args = parser.parse_args(argv)
    if args.timeout_s <= 0:
        parser.error(f"--timeout-s must be positive, got {args.timeout_s}")
    report = run_demo(args.home, args.workspace, args.out or args.home / "closed-loop", timeout_s=args.timeout_s)
    ok = report.converged and report.lost == 0 and report.duplicated == 0
    return 0 if ok else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the daemon and the stream
    sys.exit(main())
