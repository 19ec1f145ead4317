"""Past one machine: a user's stream (``orders_example``, the project in ``examples/orders``) whose driver, master
and two workers each run on their own simulated host (a network namespace), with its input, output, checkpoint and
event logs on a real S3 server, and nothing else shared.

The test process plays the control plane's host: it reaches the stream only through S3 (s3fs), the driver's control
endpoint and the master's web API. The driver host runs ``reconf agent``, which starts and restarts the driver there
when asked through S3; the test restarts the agent where a service manager would (after the host died). Skipped only
where network namespaces cannot be made (not root, no iproute2), with that reason."""

import json
import os
import urllib.request
from pathlib import Path

import pytest
from orders_example.streams import OrderWriter

from dagster_reconf.core.errors import ControlRequestError, ReconfigurationInterrupted
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.endpoint_record import pause_marker, read_endpoint, remote_client
from dagster_reconf.core.process.metrics_mirror import pull_metrics
from dagster_reconf.core.process.remote_supervisor import RemoteSupervisor
from dagster_reconf.core.reconfig import ExecutionPlan, Reconfigurer, RemoteStream
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import storage_root
from dagster_reconf.harness.oracle import check_output_in_process
from dagster_reconf.workloads.hosts import SimulatedHosts, hosts_unavailable, start_spark_cluster
from dagster_reconf.workloads.object_store import S3Server

from .conftest import wait_until

UNAVAILABLE = hosts_unavailable()
pytestmark = [
    pytest.mark.spark,
    pytest.mark.cluster,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no simulated hosts here: {UNAVAILABLE}"),
]
REPO = Path(__file__).resolve().parents[2]
TOKEN_ENV = "RECONF_HOSTED_TOKEN"


def master_state(master_ui: str) -> dict:
    with urllib.request.urlopen(f"{master_ui}/json/", timeout=5) as response:
        return json.loads(response.read())


class WrongPartitionsStream(RemoteStream):
    """A faulty migration on the driver's host: the real repartition, but to one partition fewer than asked; and a
    store that keeps the pause marker the resume removes."""

    def migrate(self, state_partitions: int, strategy: str) -> dict:
        return super().migrate(state_partitions - 1, strategy)

    def resume(self, settings: dict) -> dict:
        return self._client().resume(settings)  # the marker stays: the reconfiguration's end must remove it


def test_a_user_stream_on_other_hosts_keeps_its_state_on_s3_and_survives_its_driver_host(tmp_path, monkeypatch):
    with SimulatedHosts(["master", "worker-1", "worker-2", "driver"]) as hosts:
        # This host's s3fs, and the control token, as on a real control-plane host; the driver host gets its own.
        monkeypatch.setenv(TOKEN_ENV, "hosted-" + os.urandom(24).hex())
        with S3Server(tmp_path / "s3", host=hosts.gateway) as s3, s3.as_client_environment():
            cluster = start_spark_cluster(hosts, "master", ["worker-1", "worker-2"], tmp_path / "daemons")
            driver = hosts["driver"]
            bucket = s3.create_bucket("hosted")
            storage = f"{bucket}/reconf"
            spec = StreamSpec(
                name="hosted-orders",
                entrypoint="orders_example.streams:orders",
                options={"input_dir": f"{bucket}/orders/in", "output_dir": f"{bucket}/orders/out"},
                trigger_interval_s=1.0,
                max_per_trigger=4,
                state_partitions=4,
                master=cluster.master_url,
                executor_cores=1,
                max_cores=2,
                storage=storage,
                control_token_env=TOKEN_ENV,
                spark_conf=s3.spark_conf(),
                **driver.driver_fields(),
            )
            # The driver host's agent, with its own home, the S3 credentials and the token in its environment.
            agent_env = {**os.environ, "PYTHONPATH": str(REPO)}

            def start_agent() -> None:
                driver.start_agent(
                    tmp_path / "driver-host", storage, [spec.name], tmp_path / "logs" / "agent.log", agent_env
                )

            start_agent()
            plane = RemoteSupervisor(tmp_path / "control-plane" / "home")
            writer = OrderWriter(spec.options["input_dir"])
            writer.write(2)
            checkpoint = storage_root(storage, spec.name) / "checkpoint"

            def committed() -> int:
                return checkpoint_facts(checkpoint).last_committed_batch or -1

            with writer.keep_writing(every_s=0.5):
                started = plane.start(spec)  # the request through S3; the agent starts the driver on its host
                assert started["pid"] and "started" in started["message"], started
                wait_until(lambda: committed() >= 2, timeout_s=180, what="3 batches committed to S3")
                workers = master_state(cluster.master_ui)["workers"]
                assert sorted(w["host"] for w in workers) == sorted(
                    [hosts["worker-1"].address, hosts["worker-2"].address]
                )
                assert all(w["coresused"] == 1 for w in workers), workers  # an executor on each worker host

                # The control endpoint, found through S3 and reached over the bridge with the token from the
                # environment; the listing that Dagster's sensors read.
                first = read_endpoint(storage_root(storage, spec.name))
                assert first.host == driver.address and first.pid == started["pid"]
                status = plane.status(spec.name)
                assert status["state"] == "running" and status["master"] == cluster.master_url, status
                assert [row["driver"] for row in plane.list()] == ["running"]
                with pytest.raises(ControlRequestError) as refused:
                    ControlClient(first.port, "x" * 40, first.host).status()
                assert refused.value.status == 401

                # The driver's metrics, copied into a store on this host (never the driver host's file).
                mirror = MetricsStore(tmp_path / "control-plane" / "metrics.jsonl")
                cursor = tmp_path / "control-plane" / "metrics-cursor.json"
                assert pull_metrics(remote_client(spec), mirror, cursor).records > 0

                def copied_up_to() -> int:  # a batch's record follows its commit by a moment
                    pull_metrics(remote_client(spec), mirror, cursor)
                    return max(r["progress"]["batchId"] for r in mirror.progress())

                wait_until(lambda: copied_up_to() >= 2, timeout_s=30, what="batch 2's record in the copy")

                # A native state migration (4 -> 8) of the checkpoint on S3, run from this host: pause, migrate,
                # verify and resume through the control endpoint, with the snapshot and the ledger here. The driver
                # host dies right after the pause (its agent too): the step cannot go on, and says what to do.
                plan = ExecutionPlan.of(spec).model_dump()
                plan["partitioning"]["state_partitions"] = 8
                ledger = AuditLedger(default_ledger_url(plane.home))

                def driver_host_dies(step: str) -> None:
                    if step == "pause":
                        driver.kill_all(grace_s=0.0)

                stream = RemoteStream(plane.require(spec.name), agent_timeout_s=5)
                interrupted = Reconfigurer(stream, ledger, observe_timeout_s=5, after_step=driver_host_dies)
                with pytest.raises(ReconfigurationInterrupted, match=r"(?s)no agent answered .* re-run the same plan"):
                    interrupted.run(plan, trigger={"user": "test"})
                marker = pause_marker(storage_root(storage, spec.name))
                assert marker.exists()
                paused_at = committed()
                assert plane.driver_death(spec.name)["pid"] == first.pid  # published, not answering: died

                # The host is back and its service manager starts the agent: it starts the driver that died, which
                # stays paused (the marker on S3) until the re-run finishes the plan.
                start_agent()
                wait_until(lambda: plane.status(spec.name)["state"] == "stopped", timeout_s=180, what="paused driver")
                assert committed() == paused_at
                result = Reconfigurer(RemoteStream(plane.require(spec.name)), ledger, observe_timeout_s=5).run(
                    plan, trigger={"user": "test"}
                )
                assert result.outcome == "succeeded", result.results
                assert result.results["observe"]["health"]["verdict"] == "healthy", result.results["observe"]
                store = result.verification.stores[0]
                assert store["rows_before"] == store["rows_after"] > 0 and store["max_partition_id"] < 8
                assert checkpoint_facts(checkpoint).state_partitions == 8
                assert plane.spec(spec.name).state_partitions == 8  # the driver's spec, copied here
                assert not marker.exists()

                # A migration whose verification fails is rolled back to the paused batch, on S3, and the stream
                # resumes as it was.
                plan["partitioning"]["state_partitions"] = 6
                wrong = Reconfigurer(WrongPartitionsStream(plane.require(spec.name)), ledger, observe_timeout_s=5)
                rolled = wrong.run(plan, trigger={"user": "test"})
                assert rolled.outcome == "rolled_back", rolled.results
                assert not marker.exists()  # no driver started later stays paused for a reconfiguration that ended
                assert "checkpoint records 5 state partitions, the plan 6" in rolled.verification.problems
                facts = checkpoint_facts(checkpoint)
                assert facts.state_partitions == 8 and facts.committed
                assert plane.status(spec.name)["state"] == "running" and plane.spec(spec.name).state_partitions == 8

                # The driver host dies again; started again by its agent, the driver runs from its checkpoint on S3
                # with the spec it kept, and the metrics copy goes on from where it was.
                before = committed()
                driver.kill_all(grace_s=0.0)
                start_agent()
                wait_until(lambda: committed() >= before + 2, timeout_s=180, what="batches after the restart")
                assert read_endpoint(storage_root(storage, spec.name)).pid not in (first.pid, started["pid"])
                resumed = pull_metrics(remote_client(spec), mirror, cursor)
                assert resumed.records > 0 and not resumed.skipped
            stopped = plane.stop(spec.name)  # at a batch boundary, its last metrics copied here first
            assert stopped["stopped"], stopped
            event_logs = list((storage_root(storage, spec.name) / "eventlog").iterdir())
            assert len([p for p in event_logs if p.name.startswith("eventlog_v2_")]) == 3  # one per driver run
            # Every order once: the output on S3 against the batch job over every input file on S3.
            comparison = check_output_in_process(plane.home, spec.name, env=dict(os.environ))
            assert comparison.expected_rows > 0 and comparison.lost == comparison.duplicated == 0, comparison
