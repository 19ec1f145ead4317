"""Past one machine: the closed loop over a user's stream whose driver, master, workers and Dagster each run on a host
of their own, with the stream's input, output, checkpoint and event logs on a real S3 server.

``python -m benchmarks.cluster [--quick | --loop-only]`` (root, iproute2: the hosts are network namespaces on a private
bridge). A full run measures the closed loop, then the migrations three times each; ``--loop-only`` the loop and its
oracle (what ``tests/integration/test_cluster_loop.py`` runs in CI); ``--quick`` the migrations once each, on the
stream as the loop leaves it (2 cores), without the loop: the loop alone takes over 5 minutes.

* hosts: ``dagster`` (the daemon, its code server and runs: ``examples/orders``' code location with
  ``RECONF_REMOTE=1``), ``driver`` (``reconf agent``, which starts the stream's driver there when the control plane asks
  through S3), ``master``, ``worker-1`` and ``worker-2`` (Spark standalone, a core each); S3Proxy's S3 server on the
  bridge. The control plane reads the stream only through the driver's control endpoint and S3.
* the stream: ``orders_example`` (``examples/orders``) over JSON order files on ``s3a://``, its totals written to
  ``s3a://``, started on one core (one executor, on one worker) under a core's worth of work, with DS2 allowed the
  cluster's 2 cores; the scaling sensor and the runs it requests decide every step, exactly as on one machine.
  Converged: the sensor holds twice on full windows with no backlog growth. Then the stream's output is checked against
  the batch job over every input file, both read from S3 (``lost``, ``duplicated``).
* the migration: the converged stream's state partitions doubled by a native state migration, run from this host
  through the control endpoint (``migrate_s``: the step, its checkpoint on S3), against the same migration of the same
  stream on the same hosts with its storage on ``file://`` (``migrate_file_s``), in the same run; medians over the
  repeats (1 quick, 3 full).

The JSON line (the loop's figures null under ``--quick``, the migrations' under ``--loop-only``): ``hosts``,
``storage``, ``converged``, ``steps``, ``downtime_s`` (the longest of the loop's steps),
``lost``, ``duplicated``, ``workers_used`` (the most worker hosts the stream's executors ran on at once),
``migrate_s``, ``migrate_file_s``, their ratio, and the wall time.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from orders_example.streams import OrderWriter
from rich.console import Console

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.remote_supervisor import RemoteSupervisor
from dagster_reconf.core.reconfig import ExecutionPlan, Reconfigurer, RemoteStream
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.harness.closed_loop import run_closed_loop
from dagster_reconf.workloads.hosts import Host, SimulatedHosts, hosts_unavailable, start_spark_cluster
from dagster_reconf.workloads.object_store import S3Server

from ._common import emit, median, parse_args

REPO = Path(__file__).resolve().parent.parent
WORKSPACE = REPO / "examples" / "orders" / "workspace.yaml"
HOSTS = ["dagster", "driver", "master", "worker-1", "worker-2"]
TOKEN_ENV = "RECONF_CLUSTER_TOKEN"
SLEEP_MS, FILES_PER_S, TRIGGER_S, MAX_FILES = 20.0, 1.0, 2.0, 6  # a core's worth of work: one core falls behind
CORES_PER_WORKER, MAX_CORES = 1, 2  # an executor per worker: the second one only a scale-up uses
LOOP_S = 720.0  # a bound, quick or not: triggers grow to 13-18 s on S3, so a 6-batch window takes 80-110 s
MIGRATIONS, QUICK_MIGRATIONS = 3, 1
LOOP_FIGURES = (
    "converged",
    "steps",
    "seconds_to_converge",
    "downtime_s",
    "lost",
    "duplicated",
    "workers_used",
    "failed_runs",
)


def orders_spec(name: str, data: str, storage: str, master: str, driver: Host, s3: S3Server) -> StreamSpec:
    """The orders stream on the cluster, its files under ``data`` and its checkpoints under ``storage``."""
    return StreamSpec(
        name=name,
        entrypoint="orders_example.streams:orders",
        options={"input_dir": f"{data}/in", "output_dir": f"{data}/out", "sleep_ms_per_order": SLEEP_MS},
        master=master,
        executor_cores=1,
        max_cores=1,
        cores_ceiling=MAX_CORES,  # a scale-up starts executors in the running SparkContext (no new one)
        state_partitions=4,
        trigger_interval_s=TRIGGER_S,
        max_per_trigger=MAX_FILES,
        storage=storage,
        control_token_env=TOKEN_ENV,
        spark_conf=s3.spark_conf(),
        **driver.driver_fields(),
    )


class WorkerWatch:
    """Samples the master's view while the loop runs: the most worker hosts with cores in use at once."""

    def __init__(self, master_ui: str) -> None:
        self.master_ui, self.most = master_ui, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            try:
                with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as response:
                    workers = json.loads(response.read())["workers"]
            except OSError:
                continue
            self.most = max(self.most, sum(1 for w in workers if w.get("coresused", 0) > 0))

    def __enter__(self) -> WorkerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def migrate_seconds(supervisor: RemoteSupervisor, ledger: AuditLedger, spec: StreamSpec, times: int) -> list[float]:
    """Start ``spec``'s stream through its agent, double its state partitions ``times`` times (a native migration
    each, from this host), stop it; each migrate step's seconds."""
    supervisor.start(spec)
    seconds = []
    try:
        deadline = time.monotonic() + 180
        while (last := supervisor.metrics(spec.name).last_progress()) is None or last["progress"]["batchId"] < 2:
            if time.monotonic() > deadline:  # a plan needs the stream's sources, known from its batches
                raise RuntimeError(f"{spec.name} committed no 3 batches within 180 s: {supervisor.status(spec.name)}")
            time.sleep(1.0)
        for _ in range(times):
            stream = RemoteStream(supervisor.require(spec.name))
            plan = ExecutionPlan.of(stream.spec()).model_dump()
            plan["partitioning"]["state_partitions"] *= 2
            result = Reconfigurer(stream, ledger, observe_timeout_s=20).run(plan, trigger={"benchmark": "cluster"})
            if result.outcome != "succeeded":
                raise RuntimeError(f"the migration of {spec.name} ended {result.outcome}: {result.results}")
            seconds.append(float(result.timings["migrate"]))
    finally:
        supervisor.stop(spec.name)
    return seconds


def main() -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        lambda parser: parser.add_argument(
            "--loop-only", action="store_true", help="the closed loop and its oracle, no migration timings"
        ),
    )
    if args.quick and args.loop_only:
        raise SystemExit(
            "benchmarks.cluster: --quick measures the migrations without the loop, --loop-only the loop "
            "without the migrations; pass one of them, or neither for both"
        )
    unavailable = hosts_unavailable()
    if unavailable:
        raise SystemExit(f"benchmarks.cluster needs simulated hosts: {unavailable}")
    started = time.monotonic()
    console = Console(stderr=True)
    os.environ[TOKEN_ENV] = os.urandom(24).hex()
    with (
        tempfile.TemporaryDirectory(prefix="reconf-cluster-") as tmp,
        SimulatedHosts(HOSTS) as hosts,
        S3Server(Path(tmp) / "s3", host=hosts.gateway) as s3,
        s3.as_client_environment(),
    ):
        root = Path(tmp)
        workers = ["worker-1", "worker-2"]
        cluster = start_spark_cluster(hosts, "master", workers, root / "daemons", CORES_PER_WORKER, "1g")
        bucket = s3.create_bucket("cluster")
        driver = hosts["driver"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # the S3 credentials and the token: each host's own copy
        spec = orders_spec("orders", f"{bucket}/orders", f"{bucket}/reconf", cluster.master_url, driver, s3)
        baseline = orders_spec(
            "orders-file", f"{bucket}/orders-file", (root / "file").as_uri(), cluster.master_url, driver, s3
        )
        agents = [
            driver.start_agent(
                root / "driver-host", str(s.storage), [s.name], root / "logs" / f"agent-{s.name}.log", env
            )
            for s in (spec, baseline)
        ]
        dagster_home = root / "dagster-host" / "home"
        spec_file = root / "dagster-host" / "orders.json"
        spec_file.parent.mkdir(parents=True)
        spec_file.write_text(spec.model_dump_json())
        loop_env = {"ORDERS_SPEC_FILE": str(spec_file), "RECONF_REMOTE": "1", "ORDERS_MAX_CORES": str(MAX_CORES)}
        supervisor = RemoteSupervisor(dagster_home)
        writer = OrderWriter(spec.options["input_dir"])
        writer.write(2)
        report = None
        if args.quick:  # the stream as the loop leaves it: both workers' cores
            final = spec.with_changes({"max_cores": MAX_CORES})
        else:
            with writer.keep_writing(every_s=1.0 / FILES_PER_S), WorkerWatch(cluster.master_ui) as watch:
                report = run_closed_loop(
                    dagster_home,
                    WORKSPACE,
                    root / "out",
                    spec=spec,
                    sensor="orders_scaling_sensor",
                    timeout_s=LOOP_S,
                    env=loop_env,
                    console=console,
                    supervisor=supervisor,
                    on_dagster_host=hosts["dagster"].command,
                )
            final = StreamSpec.parse(json.loads(supervisor.paths(spec.name).spec.read_text()))
        ledger = AuditLedger(default_ledger_url(dagster_home))
        times = QUICK_MIGRATIONS if args.quick else MIGRATIONS
        on_s3: list[float] = []
        on_file: list[float] = []
        if not args.loop_only:
            with writer.keep_writing(every_s=1.0 / FILES_PER_S):
                on_s3 = migrate_seconds(supervisor, ledger, final, times)
            file_writer = OrderWriter(baseline.options["input_dir"])
            file_writer.write(2)
            with file_writer.keep_writing(every_s=1.0 / FILES_PER_S):  # the same stream, cores and state on file://
                same = {"max_cores": final.max_cores, "state_partitions": final.state_partitions}
                on_file = migrate_seconds(supervisor, ledger, baseline.with_changes(same), times)
        for agent in agents:
            agent.terminate()
    loop: dict[str, Any] = dict.fromkeys(LOOP_FIGURES)  # null where the loop did not run (--quick)
    if report is not None:
        downtimes = [r["downtime_s"] for r in report.reconfigurations if r.get("downtime_s") is not None]
        loop |= {
            "converged": report.converged,
            "steps": report.steps,
            "seconds_to_converge": report.seconds_to_converge,
            "downtime_s": max(downtimes) if downtimes else None,
            "lost": report.lost,
            "duplicated": report.duplicated,
            "workers_used": watch.most,
            "failed_runs": [r for r in report.runs if r["status"] != "SUCCESS"],
        }
    result: dict[str, Any] = {
        "benchmark": "cluster",
        "quick": args.quick,
        "hosts": len(HOSTS),
        "storage": "s3a",
        **loop,
        "final_cores": final.max_cores,
        "migrate_s": round(median(on_s3), 3) if on_s3 else None,
        "migrate_file_s": round(median(on_file), 3) if on_file else None,
        "migrate_s3_over_file": round(median(on_s3) / median(on_file), 2) if on_s3 and on_file else None,
        "wall_s": round(time.monotonic() - started, 1),
    }
    emit(result)


if __name__ == "__main__":
    main()
