"""Past one machine: a stream whose driver, master and two workers each run on their own simulated host (a network
namespace), with its checkpoint and event logs on a real S3 server, and nothing else shared.

The test process plays the control plane's host: it reads the stream only through the S3 API (s3fs) and the
master's web API, and starts and kills the driver host's processes the way an operator would there. Skipped only
where network namespaces cannot be made (not root, no iproute2), with that reason."""

import json
import os
import sys
from pathlib import Path

import pytest

from dagster_reconf.core.errors import ControlRequestError, ReconfigurationInterrupted
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.endpoint_record import pause_marker, read_endpoint, remote_client
from dagster_reconf.core.process.metrics_mirror import pull_metrics
from dagster_reconf.core.reconfig import ExecutionPlan, Reconfigurer, RemoteStream
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths, storage_root
from dagster_reconf.core.store.storage import location
from dagster_reconf.workloads.hosts import SimulatedHosts, hosts_unavailable, start_spark_cluster
from dagster_reconf.workloads.object_store import S3Server
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import wait_until

UNAVAILABLE = hosts_unavailable()
pytestmark = [
    pytest.mark.spark,
    pytest.mark.cluster,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no simulated hosts here: {UNAVAILABLE}"),
]
RECONF = str(Path(sys.executable).parent / "reconf")


def master_state(master_ui: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"{master_ui}/json/", timeout=5) as response:
        return json.loads(response.read())


def test_a_stream_on_other_hosts_keeps_its_state_on_s3_and_survives_its_driver_host(tmp_path, monkeypatch):
    with SimulatedHosts(["master", "worker-1", "worker-2", "driver"]) as hosts:
        # This host's s3fs, and the control token, as on a real control-plane host; the driver host gets its own.
        token = {"RECONF_HOSTED_TOKEN": "hosted-" + os.urandom(24).hex()}
        monkeypatch.setenv("RECONF_HOSTED_TOKEN", token["RECONF_HOSTED_TOKEN"])
        with S3Server(tmp_path / "s3", host=hosts.gateway) as s3, s3.as_client_environment():
            secrets = {**s3.client_env(), **token}
            cluster = start_spark_cluster(hosts, "master", ["worker-1", "worker-2"], tmp_path / "daemons")
            driver = hosts["driver"]
            storage = s3.create_bucket("hosted") + "/data"
            spec = bundled_spec(
                "hosted-q5",
                "q5",
                rate=400,
                trigger_interval_s=1.0,
                source_partitions=2,
                state_partitions=4,
                master=cluster.master_url,
                executor_cores=1,
                max_cores=2,
                storage=storage,
                driver_host=driver.address,
                driver_bind_address=driver.address,
                control_bind_address=driver.address,
                control_token_env="RECONF_HOSTED_TOKEN",
                spark_conf=s3.spark_conf(),
            )
            spec_file = tmp_path / "driver-host" / "spec.json"  # what the operator hands the driver host
            spec_file.parent.mkdir()
            spec_file.write_text(spec.model_dump_json())
            start = [RECONF, "--home", str(tmp_path / "driver-host" / "home"), "stream", "start", spec.name]
            start += ["--spec-file", str(spec_file)]
            driver.run(start, env={**os.environ, **secrets})

            checkpoint = location(storage) / "streams" / spec.name / "checkpoint"

            def committed() -> int:
                return checkpoint_facts(checkpoint).last_committed_batch or -1

            wait_until(lambda: committed() >= 2, timeout_s=180, what="3 batches committed to S3")
            workers = master_state(cluster.master_ui)["workers"]
            assert sorted(w["host"] for w in workers) == sorted([hosts["worker-1"].address, hosts["worker-2"].address])
            assert all(w["coresused"] == 1 for w in workers), workers  # an executor on each worker host

            # The control endpoint, found through S3 and reached over the bridge with the token from the environment.
            first = read_endpoint(storage_root(storage, spec.name))
            assert (first.host, first.driver_host) == (driver.address, first.driver_host)
            status = remote_client(spec).status()
            assert status["state"] == "running" and status["master"] == cluster.master_url, status
            assert status["checkpoint"]["last_committed_batch"] >= 2, status
            with pytest.raises(ControlRequestError) as refused:
                ControlClient(first.port, "x" * 40, first.host).status()
            assert refused.value.status == 401

            # The driver's metrics, copied into a store on this host (never the driver host's file).
            mirror = MetricsStore(tmp_path / "control-plane" / "metrics.jsonl")
            cursor = tmp_path / "control-plane" / "metrics-cursor.json"
            assert pull_metrics(remote_client(spec), mirror, cursor).records > 0
            copied = [r["progress"]["batchId"] for r in mirror.progress()]
            assert copied and max(copied) >= 2

            # A native state migration (4 -> 8) of the checkpoint on S3, run from this host: pause, migrate, verify
            # and resume through the control endpoint, the snapshot and the ledger here. The driver host dies right
            # after the pause; started again there, its driver stays paused (the marker on S3), and the re-run
            # finishes the plan.
            plane = StreamPaths(tmp_path / "control-plane" / "home", spec.name)
            plane.create()
            plane.write_spec(spec.model_dump_json(indent=2))
            plan = ExecutionPlan.of(spec).model_dump()
            plan["partitioning"]["state_partitions"] = 8
            ledger = AuditLedger(default_ledger_url(plane.home))
            kept = tmp_path / "driver-host" / "home" / "streams" / spec.name / "spec.json"
            start[-1] = str(kept)  # from now on the operator starts the stream with the spec its driver keeps

            def driver_host_dies(step: str) -> None:
                if step == "pause":
                    driver.kill_all(grace_s=0.0)

            interrupted = Reconfigurer(RemoteStream(plane), ledger, observe_timeout_s=30, after_step=driver_host_dies)
            with pytest.raises(ReconfigurationInterrupted, match=r"start it there with .* re-run the same plan"):
                interrupted.run(plan, trigger={"user": "test"})
            marker = pause_marker(storage_root(storage, spec.name))
            assert marker.exists()
            paused_at = committed()
            driver.run(start, env={**os.environ, **secrets})
            assert remote_client(spec).status()["state"] == "stopped"  # started paused: the query waits
            assert committed() == paused_at
            result = Reconfigurer(RemoteStream(plane), ledger, observe_timeout_s=30).run(plan, trigger={"user": "test"})
            assert result.outcome == "succeeded", result.results
            observed = result.results["observe"]
            assert observed["health"]["verdict"] == "healthy", observed  # new batches seen in the pulled copy
            store = result.verification.stores[0]
            assert store["rows_before"] == store["rows_after"] > 0 and store["max_partition_id"] < 8
            assert checkpoint_facts(checkpoint).state_partitions == 8
            assert StreamSpec.parse(json.loads(plane.spec.read_text())).state_partitions == 8  # the driver's spec now
            assert [r["progress"]["batchId"] for r in MetricsStore(plane.metrics).progress()]  # its copy, pulled
            assert not marker.exists()

            # The driver host dies (every process on it); the stream restarts there from its checkpoint on S3, with
            # the spec its driver kept.
            before = committed()
            driver.kill_all(grace_s=0.0)
            driver.run(start, env={**os.environ, **secrets})
            wait_until(lambda: committed() >= before + 2, timeout_s=180, what="batches after the restart")
            assert read_endpoint(storage_root(storage, spec.name)).pid != first.pid
            assert remote_client(spec).status()["state"] == "running"
            resumed = pull_metrics(remote_client(spec), mirror, cursor)  # the same store on the driver host: no gap
            assert resumed.records > 0 and not resumed.skipped
            assert max(r["progress"]["batchId"] for r in mirror.progress()) >= before + 2
            facts = checkpoint_facts(checkpoint)
            assert facts.state_partitions == 8 and facts.last_committed_batch >= before + 2
            event_logs = list((location(storage) / "streams" / spec.name / "eventlog").iterdir())
            assert len([p for p in event_logs if p.name.startswith("eventlog_v2_")]) == 3  # one per driver run
