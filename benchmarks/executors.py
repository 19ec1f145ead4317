"""A cores change on a standalone cluster: executors resized in the same SparkContext vs a new one.

``python -m benchmarks.executors [--quick]``

On a loopback standalone cluster (one worker, 3 cores), a word count in its own driver is
reconfigured from 1 to 3 cores and from 2 to 3 state partitions, two ways, in the same run:

* ``in_place``: the spec has ``cores_ceiling=3``, so prepare adds two executors while the
  stream runs and the resume only restarts the query (``core/spark/executors.py``);
* ``new_context`` (the baseline): no ceiling, so the change needs a new SparkContext; it is
  handed over to a warm standby driver started in prepare (today's path for such changes).

Each run starts a fresh stream, waits for it to settle, reconfigures, lets it catch up,
stops it and compares its output with the batch oracle. Reported per way (medians over the
runs): downtime (pause begin to the first batch after it), pause, prepare seconds, catch-up,
the seconds of each step while the query is stopped (where the downtime goes), and lost and
duplicated rows summed; and the ratio of the downtime medians. ``--quick``: one
run per way; a full run: three.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.local_cluster import start_cluster, stop_cluster
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, Reconfigurer
from dagster_reconf.core.spark.session import helper_session
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.workloads.oracle import check_stream_output
from dagster_reconf.workloads.streams import bundled_spec

from ._common import emit, median, parse_args

WAYS = ("in_place", "new_context")
PAUSED_STEPS = ("pause", "migrate", "verify", "resume")  # where the downtime goes, up to the first batch after it
NAME = "elastic"
OBSERVE_S = 20.0


def one_run(master_url: str, home: Path, way: str, spark) -> dict[str, Any]:
    """One stream, one reconfiguration 1 -> 3 cores; its figures and the oracle's verdict."""
    supervisor = StreamSupervisor(home)
    resources = {"executor_cores": 1, "max_cores": 1, **({"cores_ceiling": 3} if way == "in_place" else {})}
    spec = bundled_spec(
        NAME,
        "wordcount",
        master=master_url,
        rate=300,
        source_partitions=1,
        state_partitions=2,
        trigger_interval_s=0.5,
        vocabulary=300,
        executor_memory="512m",
    ).with_changes(resources)
    supervisor.start(spec)
    try:
        deadline = time.monotonic() + 180
        while (checkpoint_facts(supervisor.paths(NAME).checkpoint).last_committed_batch or -1) < 5:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{way}: the stream did not commit 6 batches in 180 s")
            time.sleep(0.5)
        plan = ExecutionPlan.of(spec).model_dump()
        plan["resources"]["max_cores"], plan["partitioning"]["state_partitions"] = 3, 3
        ledger = AuditLedger(default_ledger_url(home))
        result = Reconfigurer(DriverStream(supervisor, NAME), ledger, observe_timeout_s=OBSERVE_S).run(plan)
        if result.outcome != "succeeded":
            raise RuntimeError(f"{way}: the reconfiguration ended {result.outcome}: {result.results}")
        supervisor.stop(NAME, timeout_s=60)
        comparison = check_stream_output(spark, home, spec)
    finally:
        if supervisor.driver_info(NAME) is not None:
            supervisor.stop(NAME, timeout_s=60)
        supervisor.clean_up_drivers(NAME)
    observed = result.observation
    return {
        "downtime_s": observed.downtime_s,
        "pause_s": observed.pause_s,
        "catch_up_s": observed.catch_up_s,
        "prepare_s": round(result.timings.get("prepare", 0.0), 3),
        "resume_scope": result.resumed.scope,
        "handed_over": result.handed_over,
        "lost": comparison.lost,
        "duplicated": comparison.duplicated,
        "steps_s": {step: round(result.timings.get(step, 0.0), 3) for step in PAUSED_STEPS},
    }


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    repeat = 1 if args.quick else 3
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="reconf-executors-") as tmp:
        cluster_home = Path(tmp) / "cluster"
        cluster = start_cluster(cluster_home, workers=1, cores_per_worker=3, memory_per_worker="2g")
        spark = helper_session("reconf-executors-oracle", shuffle_partitions=2)
        try:
            for i in range(repeat):
                for way in WAYS:  # interleaved: a noisy minute hits both ways
                    figures = one_run(cluster.master_url, Path(tmp) / f"{way}-{i}", way, spark)
                    runs[way].append(figures)
                    print(f"{way} #{i + 1}: {figures}", flush=True)
        finally:
            spark.stop()
            stop_cluster(cluster_home)
    summary = {
        way: {
            "downtime_s_p50": round(median(r["downtime_s"] for r in rs), 3),
            "pause_s_p50": round(median(r["pause_s"] for r in rs), 3),
            "prepare_s_p50": round(median(r["prepare_s"] for r in rs), 3),
            "catch_up_s_p50": round(median(r["catch_up_s"] for r in rs if r["catch_up_s"] is not None), 3),
            "caught_up": sum(r["catch_up_s"] is not None for r in rs),
            "steps_s_p50": {step: round(median(r["steps_s"][step] for r in rs), 3) for step in PAUSED_STEPS},
            "lost": sum(r["lost"] for r in rs),
            "duplicated": sum(r["duplicated"] for r in rs),
        }
        for way, rs in runs.items()
    }
    baseline = summary["new_context"]["downtime_s_p50"]
    emit(
        {
            "benchmark": "executors",
            "mode": "quick" if args.quick else "full",
            "runs_per_way": repeat,
            **summary,
            "downtime_p50_ratio_in_place_vs_new_context": round(summary["in_place"]["downtime_s_p50"] / baseline, 3)
            if baseline
            else 0.0,
        }
    )


if __name__ == "__main__":
    main()
