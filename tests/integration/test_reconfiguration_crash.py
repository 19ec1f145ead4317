"""Crash safety of reconfigurations of a stream in its own driver process.

The process running the reconfiguration (the ``reconf`` CLI) is killed right after each
step in turn (``native`` and ``precopy`` migrations, alternately), and separately the stream's driver is killed after
each step; each time a
re-run of the same plan finishes the job. At the end the stream's output equals the
oracle over every event it consumed: nothing lost, nothing duplicated.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.process_tree import session_processes, signal_processes
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import STEPS, DriverStream, ExecutionPlan, ReconfigurationInterrupted, Reconfigurer
from dagster_reconf.core.reconfig.incidents import record_stream_incidents
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore, record_row
from dagster_reconf.workloads.oracle import consumed_events
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import assert_matches_oracle, wait_until

# Eight driver starts a test: about 4 min alone (25 s a step, 2026-11-26), 9 min beside the rest of CI, so the
# default 10 min bound (meant to catch hangs) was too close.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

OBSERVE_S = 8.0


@pytest.fixture(name="stream")
def stream_fixture(tmp_path):
    supervisor = StreamSupervisor(tmp_path / "home")
    spec = bundled_spec(
        "crash", "wordcount", rate=400, source_partitions=1, state_partitions=4, trigger_interval_s=0.5, vocabulary=800
    )
    supervisor.start(spec)
    wait_until(
        lambda: (checkpoint_facts(supervisor.paths("crash").checkpoint).last_committed_batch or -1) >= 1,
        what="two batches",
    )
    yield supervisor, spec
    if supervisor.driver_info("crash") is not None:
        supervisor.stop("crash", timeout_s=60)


def assert_output_matches_oracle(spark, supervisor: StreamSupervisor, spec: StreamSpec) -> None:
    if supervisor.driver_info(spec.name) is None:
        supervisor.start(StreamSpec.parse(json.loads(supervisor.paths(spec.name).spec.read_text())))
    wait_until(lambda: supervisor.status(spec.name).get("state") == "running", what="stream running")
    supervisor.stop(spec.name, timeout_s=60)
    paths = supervisor.paths(spec.name)
    assert checkpoint_facts(paths.checkpoint).committed
    assert_matches_oracle(spark, supervisor.home, StreamSpec.parse(json.loads(paths.spec.read_text())))
    assert record_row(MetricsStore(paths.metrics).last_progress())["end_offset"] == consumed_events(paths.checkpoint)


def reconf_cli(home, *args, kill_after: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    command = ["-m", "tests.integration.kill_after_step", kill_after] if kill_after else ["-m", "dagster_reconf.cli"]
    return subprocess.run(
        [sys.executable, *command, "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_killed_reconfiguration_finishes_on_rerun_after_every_step(spark, stream):
    supervisor, spec = stream
    home = supervisor.home
    for k, step in enumerate(STEPS):
        partitions = 5 if k % 2 == 0 else 4
        strategy = "native" if k % 2 == 0 else "precopy"  # precopy killed after prepare (its copy made), migrate, ...
        args = (
            "reconfigure",
            "apply",
            "crash",
            "--set",
            f"state_partitions={partitions}",
            "--observe-s",
            str(OBSERVE_S),
            "--strategy",
            strategy,
        )
        killed = reconf_cli(home, *args, kill_after=step)
        assert killed.returncode == 137, f"after {step}: {killed.stdout}{killed.stderr}"
        rerun = reconf_cli(home, *args)
        assert rerun.returncode == 0, f"re-run after a kill after {step}: {rerun.stdout}{rerun.stderr}"
        outcome = "noop" if step == "record" else "succeeded"
        assert f": {outcome}" in rerun.stdout, rerun.stdout
        assert checkpoint_facts(supervisor.paths("crash").checkpoint).state_partitions == partitions
        assert supervisor.status("crash")["state"] == "running"
    # Killed while the driver migrates: the re-run, at once, waits for that migration to end where it still runs (it
    # would otherwise restore the checkpoint under it; the wait itself is tested in tests/unit/reconfig), then
    # finishes the plan.
    args = ("reconfigure", "apply", "crash", "--set", "state_partitions=6", "--observe-s", str(OBSERVE_S))
    killed = reconf_cli(home, *args, kill_after="during:migrate")
    assert killed.returncode == 137, f"during migrate: {killed.stdout}{killed.stderr}"
    rerun = reconf_cli(home, *args)
    assert rerun.returncode == 0 and ": succeeded" in rerun.stdout, f"{rerun.stdout}{rerun.stderr}"
    assert checkpoint_facts(supervisor.paths("crash").checkpoint).state_partitions == 6
    ledger = AuditLedger(default_ledger_url(home))
    assert ledger.verify().ok and ledger.lock("crash") is None
    resumed = ledger.records(stream="crash", kinds=["reconfiguration.resumed"])
    assert len(resumed) == len(STEPS), "every re-run but the last continued the killed reconfiguration"
    assert "waited_for_driver_s" in resumed[-1].payload, resumed[-1].payload
    audit = reconf_cli(home, "audit", "verify")
    assert audit.returncode == 0 and "chain intact" in audit.stdout
    assert_output_matches_oracle(spark, supervisor, spec)


def kill_driver(supervisor: StreamSupervisor, name: str) -> None:
    """``kill -9`` the driver and everything it started (its JVM and Python workers)."""
    info = supervisor.driver_info(name)
    assert info is not None
    signal_processes(session_processes(int(info["pid"])), signal.SIGKILL)
    wait_until(lambda: supervisor.driver_info(name) is None, timeout_s=30, what="driver gone")


def test_killed_driver_is_recovered_by_a_rerun_after_every_step(spark, stream):
    supervisor, spec = stream
    ledger = AuditLedger(default_ledger_url(supervisor.home))
    for k, step in enumerate(STEPS):
        partitions = 6 if k % 2 == 0 else 4
        target = ExecutionPlan.of(StreamSpec.parse(json.loads(supervisor.paths("crash").spec.read_text())))
        plan = target.model_dump()
        plan["partitioning"]["state_partitions"] = partitions

        def kill_after(name: str, step: str = step) -> None:
            if name == step:
                kill_driver(supervisor, "crash")

        handle = DriverStream(supervisor, "crash")
        try:
            # Steps that reach the stream start a lost driver again (paused), so some runs finish by themselves.
            result = Reconfigurer(handle, ledger, observe_timeout_s=OBSERVE_S, after_step=kill_after).run(plan)
        except ReconfigurationInterrupted:
            result = Reconfigurer(handle, ledger, observe_timeout_s=OBSERVE_S).run(plan)
        assert result.outcome == "succeeded", result.results
        if step == "record":
            assert supervisor.driver_info("crash") is None, "the driver died after the job was done"
            assert_the_death_is_on_the_record(supervisor, ledger)
            supervisor.start(handle.spec())
        assert checkpoint_facts(supervisor.paths("crash").checkpoint).state_partitions == partitions
        assert supervisor.status("crash")["state"] == "running", f"after a driver kill after {step}"
    assert ledger.verify().ok and ledger.lock("crash") is None
    assert_output_matches_oracle(spark, supervisor, spec)


def assert_the_death_is_on_the_record(supervisor: StreamSupervisor, ledger: AuditLedger) -> None:
    """A driver that died outside any reconfiguration is ``died`` in status and one ``driver_died`` record in the
    ledger, put there by the streams sensor's tick; whoever looks again adds nothing."""
    from dagster import build_sensor_context, instance_for_test

    from dagster_reconf import AuditLedgerResource, StreamRuntimeResource, build_scaling_assets, build_streams_sensor

    assert supervisor.status("crash")["state"] == "died"
    sensor = build_streams_sensor(scaling=build_scaling_assets(streams=["crash"]))
    resources = {
        "streams": StreamRuntimeResource(home=str(supervisor.home)),
        "audit_ledger": AuditLedgerResource(home=str(supervisor.home)),
    }
    with instance_for_test() as instance:
        said = sensor(build_sensor_context(instance=instance, resources=resources)).skip_reason.skip_message
    (died,) = ledger.records(stream="crash", kinds=["driver_died"])
    assert f"driver_died (driver process {died.payload['key']} is gone" in said and f"#{died.seq}" in said, said
    assert record_stream_incidents(ledger, DriverStream(supervisor, "crash")) == []
