"""A stream whose checkpoint and event logs live on a storage URL: ``file://`` (the same Hadoop
FileSystem and fsspec code paths as ``hdfs://``, without a cluster) and ``s3a://`` on a real S3
server (S3Proxy, on loopback): Spark writes there through Hadoop, the control plane reads there
through fsspec, and a native state migration with its snapshot, verification and oracle check
works on it."""

import json
import uuid

import pytest

from dagster_reconf.cli import main as reconf
from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, Reconfigurer
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.storage import is_local, location
from dagster_reconf.core.traces.store import TraceStore
from dagster_reconf.workloads.object_store import S3Server
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import assert_matches_oracle, wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(name="s3", scope="module")
def s3_fixture(tmp_path_factory):
    """An S3 server (S3Proxy) on loopback; the control plane (this process, and the drivers it starts) finds it
    through the standard AWS environment, as s3fs does anywhere."""
    with S3Server(tmp_path_factory.mktemp("s3")) as server, server.as_client_environment():
        yield server


def storage_for(kind: str, tmp_path, request) -> tuple[str, dict[str, str]]:
    """A storage URL of ``kind`` and the ``spark_conf`` Spark needs to write there."""
    if kind == "file":
        return (tmp_path / "storage").as_uri(), {}
    s3 = request.getfixturevalue("s3")
    return s3.create_bucket(f"reconf-{uuid.uuid4().hex[:12]}") + "/data", s3.spark_conf()


@pytest.mark.parametrize("kind", ["file", "s3a"])
def test_stream_on_a_storage_url_runs_migrates_state_and_is_traced(spark, supervisor, tmp_path, request, kind):
    """In a driver process of its own, as in production: a Hadoop filesystem's jars (S3A's) must be on the classpath
    when the JVM starts, and a JVM this process started earlier for another test would not have them."""
    storage, spark_conf = storage_for(kind, tmp_path, request)
    spec = bundled_spec(
        "remote-q5",
        "q5",
        rate=600,
        max_per_trigger=3000,
        trigger_interval_s=0.5,
        source_partitions=2,
        state_partitions=4,
        storage=storage,
        spark_conf=spark_conf,
    )
    supervisor.start(spec)
    paths = supervisor.paths(spec.name)
    wait_until(lambda: (checkpoint_facts(paths.checkpoint).last_committed_batch or -1) >= 1, what="2 batches")
    remote = location(storage) / "streams" / spec.name
    assert (remote / "checkpoint" / "commits").is_dir() and any((remote / "eventlog").iterdir())
    assert not (paths.root / "checkpoint").exists() and not (paths.root / "eventlog").exists()

    ledger = AuditLedger(default_ledger_url(supervisor.home))
    plan = ExecutionPlan.of(spec).model_dump()
    plan["partitioning"]["state_partitions"] = 8
    result = Reconfigurer(DriverStream(supervisor, spec.name), ledger, observe_timeout_s=15).run(
        plan, trigger={"user": "test"}
    )
    assert result.outcome == "succeeded", result.results
    verification = result.results["verify"]
    assert (
        verification["ok"] and verification["stores"][0]["rows_before"] == verification["stores"][0]["rows_after"] > 0
    )
    assert checkpoint_facts(remote / "checkpoint").state_partitions == 8
    disk = result.results["preflight"]["checks"]["disk"]
    assert disk["state_bytes"] > 0  # read through the store's own API
    if is_local(remote):  # a file:// store is local: its disk is checked; an object store's quota is its own
        assert disk["free_bytes"] > 0
    else:
        assert disk["free_bytes"] is None, disk
    wait_until(
        lambda: (supervisor.status(spec.name).get("batch_id") or -1) > result.verification.after_batch,
        what="a batch of the resumed query",
    )
    supervisor.stop(spec.name, timeout_s=60)
    assert_matches_oracle(spark, supervisor.home, spec)
    report = TraceStore(paths.traces).ingest(paths.event_log)
    assert report.activities > 0 and report.skipped.get("corrupt_line", 0) == 0


def test_cli_starts_a_driver_on_a_storage_url_and_refuses_moving_it(tmp_path):
    """The production path: ``reconf stream start --storage`` (a driver process), status read from there."""
    storage = (tmp_path / "storage").as_uri()
    home = tmp_path / "home"
    supervisor = StreamSupervisor(home)
    assert (
        reconf(
            [
                "--home",
                str(home),
                "stream",
                "start",
                "cli-remote",
                "--entrypoint",
                "dagster_reconf.workloads.streams:wordcount",
                "--option",
                "rate=2000",
                "--trigger-interval-s",
                "0.5",
                "--storage",
                storage,
            ]
        )
        == 0
    )
    try:
        wait_until(lambda: (supervisor.status("cli-remote").get("batch_id") or -1) >= 1, what="two batches")
        status = supervisor.status("cli-remote")
        assert status["checkpoint"]["last_committed_batch"] >= 1
        remote = tmp_path / "storage" / "streams" / "cli-remote"
        assert (remote / "checkpoint" / "offsets").is_dir() and any((remote / "eventlog").iterdir())
    finally:
        supervisor.stop("cli-remote", timeout_s=60)
    moved = StreamSpec.parse(json.loads(supervisor.paths("cli-remote").spec.read_text())).with_changes(
        {"storage": None}
    )
    with pytest.raises(SpecError, match="storage"):
        supervisor.start(moved)
