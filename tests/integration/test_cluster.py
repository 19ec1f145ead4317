"""A stream on a real standalone cluster on 127.0.0.1: separate executor JVMs, same result; a cores change within
the spec's ``cores_ceiling`` adds and removes executors in the same SparkContext (one cluster for the module)."""

import json
import urllib.request

import pytest

from dagster_reconf.core.errors import ReconfError, StreamStateError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.local_cluster import start_cluster, stop_cluster
from dagster_reconf.core.process.process_tree import session_processes
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, Reconfigurer
from dagster_reconf.core.spark.executor_room import granted_cores
from dagster_reconf.core.store.cluster_record import cluster_info
from dagster_reconf.core.store.metrics import MetricsStore, record_row
from dagster_reconf.core.traces.critical_path import snapshot
from dagster_reconf.core.traces.store import TraceStore
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import assert_matches_oracle, wait_until
from .test_reconfiguration_crash import assert_output_matches_oracle

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

EVENTS = 6000


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster") / "home"
    cluster = start_cluster(home, workers=1, cores_per_worker=3, memory_per_worker="2g")
    yield home, cluster
    assert stop_cluster(home)["stopped"]
    for pid in [cluster.master_pid, *cluster.worker_pids]:
        assert session_processes(pid) == []
    assert cluster_info(home) is None


def test_stream_runs_on_standalone_cluster(spark, cluster):
    home, cluster = cluster
    assert cluster.master_url.startswith("spark://127.0.0.1:")
    assert cluster_info(home) is not None
    with pytest.raises(StreamStateError, match="already running"):
        start_cluster(home)

    supervisor = StreamSupervisor(home)
    spec = bundled_spec(
        "on-cluster",
        "wordcount",
        master=cluster.master_url,
        rate=1_000_000,
        max_events=EVENTS,
        max_per_trigger=2000,
        trigger_interval_s=0.2,
        vocabulary=300,
        executor_memory="1g",
    )
    info = supervisor.start(spec)
    store = MetricsStore(supervisor.paths(spec.name).metrics)

    def done() -> bool:
        progress = store.progress()
        return bool(progress) and record_row(progress[-1])["end_offset"] == EVENTS

    wait_until(done, timeout_s=180, what=f"all {EVENTS} events processed on the cluster")
    assert info["app_id"].startswith("app-"), "a standalone application, not local mode"
    with urllib.request.urlopen(f"{cluster.master_ui}/json/", timeout=5) as resp:
        apps = json.loads(resp.read())["activeapps"]
    assert [a["id"] for a in apps] == [info["app_id"]] and apps[0]["cores"] >= 1
    supervisor.stop(spec.name)
    assert session_processes(info["pid"]) == []

    # Its event log names real executor slots (not the driver), and CP holds per batch.
    store = TraceStore(supervisor.paths(spec.name).traces)
    assert store.ingest(supervisor.paths(spec.name).event_log).activities > 0
    table = store.activities(*store.time_range())
    executors = {w.split("/")[0] for w in table.loc[table["src_worker"].isna(), "worker"]}
    assert executors and "driver" not in executors
    spans = table[table["batch_id"] >= 0].groupby("batch_id").agg(lo=("start_ms", "min"), hi=("end_ms", "max"))
    for window in spans.itertuples():
        assert abs(snapshot(table, window.lo, window.hi)[1].cp_sum - 1) <= 1e-9

    assert assert_matches_oracle(spark, home, spec).expected_rows == 300


def test_cores_change_within_the_ceiling_resizes_executors_in_the_same_context(spark, cluster, tmp_path):
    home, cluster = cluster
    supervisor = StreamSupervisor(home)  # the cluster's home: preflight finds the master's UI there
    name = "elastic"
    # A ceiling above the worker's 3 cores: what the cluster has room for is checked, not assumed.
    spec = bundled_spec(
        name,
        "wordcount",
        master=cluster.master_url,
        rate=300,
        source_partitions=1,
        state_partitions=2,
        trigger_interval_s=0.5,
        vocabulary=300,
        executor_memory="512m",
    ).with_changes({"executor_cores": 1, "max_cores": 1, "cores_ceiling": 4})
    info = supervisor.start(spec)
    try:
        # The master launched executors up to the ceiling; the driver kept max_cores' worth.
        wait_until(lambda: (supervisor.status(name).get("batch_id") or -1) >= 1, timeout_s=120, what="two batches")
        assert supervisor.status(name)["executors"] == 1
        wait_until(lambda: granted_cores(cluster.master_ui, info["app_id"]) == 1, timeout_s=60, what="the surplus gone")
        ledger = AuditLedger(default_ledger_url(supervisor.home))
        stream = DriverStream(supervisor, name)

        # Up: 1 -> 3 cores with the state moved to 3 partitions; no standby, no new SparkContext.
        plan = ExecutionPlan.of(spec).model_dump()
        plan["resources"]["max_cores"], plan["partitioning"]["state_partitions"] = 3, 3
        up = Reconfigurer(stream, ledger, observe_timeout_s=8.0).run(plan)
        assert up.outcome == "succeeded", up.results
        assert {a["knob"]: a["effect"] for a in up.actions}["max_cores"] == "executor_resize"
        assert "standby" not in up.results["prepare"] and up.resumed.scope == "executors"
        assert up.results["prepare"]["executors"]["executors"] == 3, "added while the stream ran, before the pause"
        assert up.results["prepare"]["executors"]["warm"]["cold"] == [], "each ran tasks before the pause"
        assert up.verification.ok
        wait_until(lambda: supervisor.status(name)["executors"] == 3, timeout_s=90, what="three executors")
        status = supervisor.status(name)
        assert status["app_id"] == info["app_id"] and supervisor.driver_info(name)["pid"] == info["pid"], (
            "the same driver and SparkContext"
        )
        assert granted_cores(cluster.master_ui, info["app_id"]) == 3

        # Down: 3 -> 2 cores, the executor removed while the query was stopped; the stream carries on.
        plan["resources"]["max_cores"] = 2
        down = Reconfigurer(stream, ledger, observe_timeout_s=8.0).run(plan)
        assert down.outcome == "succeeded" and down.resumed.scope == "executors", down.results
        assert "executors" not in down.results["prepare"], "none removed while the stream ran"
        wait_until(lambda: granted_cores(cluster.master_ui, info["app_id"]) == 2, timeout_s=60, what="two cores")
        assert supervisor.status(name)["app_id"] == info["app_id"]

        # Above the ceiling, or within it but beyond the worker's free cores: refused before anything is touched,
        # naming the fix.
        plan["resources"]["max_cores"] = 5
        with pytest.raises(ReconfError, match="max_cores 5 is above cores_ceiling 4: raise cores_ceiling"):
            Reconfigurer(stream, ledger, observe_timeout_s=8.0).run(plan)
        plan["resources"]["max_cores"] = 4
        with pytest.raises(
            ReconfError,
            match=r"room for 1 more executor\(s\) of 1 core\(s\) and 512 MiB, not the 2 "
            r"this change adds \(worker 127\.0\.0\.1:\d+: 1 cores, 1024 MiB free\)",
        ):
            Reconfigurer(stream, ledger, observe_timeout_s=8.0).run(plan)
        assert supervisor.status(name)["state"] == "running" and supervisor.status(name)["executors"] == 2
        assert ledger.verify().ok
        assert_output_matches_oracle(spark, supervisor, spec)
    finally:
        if supervisor.driver_info(name) is not None:
            supervisor.stop(name, timeout_s=60)
