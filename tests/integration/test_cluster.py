"""A stream on a real standalone cluster on 127.0.0.1: separate executor JVMs, same result."""

import json
import urllib.request

import pytest

from dagster_reconf.core.cluster import cluster_info, start_cluster, stop_cluster
from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.metrics import MetricsStore, record_row
from dagster_reconf.core.session import helper_session
from dagster_reconf.core.supervisor import StreamSupervisor, session_processes
from dagster_reconf.core.traces.critical_path import snapshot
from dagster_reconf.core.traces.store import TraceStore
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import assert_matches_oracle, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

EVENTS = 6000


def test_stream_runs_on_standalone_cluster(tmp_path):
    home = tmp_path / "home"
    cluster = start_cluster(home, workers=1, cores_per_worker=2, memory_per_worker="1g")
    pids = [cluster.master_pid, *cluster.worker_pids]
    try:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        assert cluster_info(home) is not None
        with pytest.raises(StreamStateError, match="already running"):
            start_cluster(home)

        supervisor = StreamSupervisor(home)
        spec = bundled_spec("on-cluster", "wordcount", master=cluster.master_url, rate=1_000_000, max_events=EVENTS,
            max_per_trigger=2000, trigger_interval_s=0.2, vocabulary=300, executor_memory="1g",
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

        spark = helper_session("reconf-cluster-oracle")
        try:
            assert assert_matches_oracle(spark, home, spec).expected_rows == 300
        finally:
            spark.stop()
    finally:
        assert stop_cluster(home)["stopped"]
    for pid in pids:
        assert session_processes(pid) == []
    assert cluster_info(home) is None
