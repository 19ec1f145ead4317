"""The scaling sensor on streams the control plane did not write, each started by a Dagster run: a file-source
stream that cannot keep up gets a DS2 plan, a healthy one a skip with its reason, and a source whose backlog
cannot be read a skip that says so, on every tick."""

import json

import pytest
from dagster import build_sensor_context, instance_for_test
from orders_example.streams import OrderWriter

from dagster_reconf import (
    AuditLedgerResource,
    StreamRuntimeResource,
    build_scaling_assets,
    build_scaling_sensor,
    build_stream_control_job,
)
from dagster_reconf.cli import main as reconf
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.scaling.scaling_plan import ScalingPlan
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import progress_frame

from .conftest import wait_until

pytestmark = pytest.mark.spark

POLICY = {"window_batches": 3, "warmup_batches": 1, "stabilization_s": 0, "scale_down_delay_s": 3600}


def start(supervisor: StreamSupervisor, spec: StreamSpec, instance) -> None:
    control = build_stream_control_job([spec])
    result = control.execute_in_process(
        run_config={"ops": {"control_stream": {"config": {"stream": spec.name}}}},
        instance=instance,
        resources={"streams": StreamRuntimeResource(home=str(supervisor.home))},
    )
    assert result.success


def tick(sensor, supervisor: StreamSupervisor, instance, cursor=None):
    resources = {
        "streams": StreamRuntimeResource(home=str(supervisor.home)),
        "audit_ledger": AuditLedgerResource(home=str(supervisor.home)),
    }
    return sensor(build_sensor_context(instance=instance, cursor=cursor, resources=resources))


def batches(supervisor: StreamSupervisor, name: str) -> int:
    return (supervisor.status(name).get("batch_id") or -1) + 1


def orders(name: str, tmp_path, **fields) -> StreamSpec:
    return StreamSpec(
        name=name,
        entrypoint="orders_example.streams:orders",
        trigger_interval_s=fields.pop("trigger_interval_s", 1.0),
        options={
            "input_dir": str(tmp_path / name / "in"),
            "output_dir": str(tmp_path / name / "out"),
            **fields.pop("options", {}),
        },
        **fields,
    )


def test_a_file_stream_that_falls_behind_gets_a_ds2_plan(supervisor, tmp_path, capsys):
    # One core; each order costs 20 ms of simulated enrichment: a file of 50 is a second of work, and one arrives
    # every half second.
    spec = orders(
        "behind", tmp_path, master="local[1]", state_partitions=4, max_per_trigger=3, options={"sleep_ms_per_order": 20}
    )
    writer = OrderWriter(tmp_path / "behind" / "in")
    writer.write(2)
    scaling = build_scaling_assets(streams=["behind"], policy_config=POLICY)
    sensor = build_scaling_sensor(stream="behind", scaling=scaling, minimum_interval_seconds=1)
    with instance_for_test() as instance, writer.keep_writing(every_s=0.5):
        start(supervisor, spec, instance)
        wait_until(lambda: batches(supervisor, "behind") >= 5, timeout_s=150, what="five batches")
        # The driver lists the directory once a batch's progress arrives: its offered position is read after the batch
        frame = progress_frame(supervisor.metrics("behind").read(0)[0])
        listed_after_batch = frame["offered_after_s"] - frame["batch_duration_ms"] / 1000.0
        assert listed_after_batch.between(-0.05, 5.0).all(), frame[["batch_id", "batch_duration_ms", "offered_after_s"]]
        result = tick(sensor, supervisor, instance)
        assert result.run_requests, result.skip_reason
        (request,) = result.run_requests
        plan = ScalingPlan.parse(request.run_config["ops"]["ds2_plans"]["config"]["plan"])
        assert plan.current.cores == 1 and plan.target.cores >= 2 and plan.current.source_partitions is None
        assert plan.current.max_per_trigger == 3
        assert plan.target.source_partitions is None  # no source-partitions knob: the plan does not invent one
        assert plan.predicted["observed_backlog_growth"] > 0 and plan.report
        observation = result.asset_events[0].metadata
        assert observation["decision"].value == "scale_up"
        # The same decision from the CLI (the function ds2_plans records), then carried out by it.
        home, policy = ["--home", str(supervisor.home)], [f"--set={k}={v}" for k, v in POLICY.items()]
        capsys.readouterr()
        assert reconf([*home, "plan", "behind", "--json", *policy]) == 0
        asked = json.loads(capsys.readouterr().out)
        assert asked["action"] == "scale_up" and not asked["for_next_run"] and not asked["recommend_only"]
        assert asked["plan"]["target"]["cores"] >= 2 and asked["evidence"]["batches"] >= 3, asked
        assert asked["reason"].startswith("DS2: ") and asked["query_ended_at"] is None
        assert reconf([*home, "plan", "behind", "--apply", "--observe-s", "20", *policy]) == 0
        applied = capsys.readouterr().out
        assert "reconfiguration " in applied and "succeeded" in applied, applied
        spec = DriverStream(supervisor, "behind").spec()
        assert spec.master == f"local[{asked['plan']['target']['cores']}]", spec


def test_a_healthy_file_stream_is_left_alone_with_its_reason(supervisor, tmp_path):
    # Its batches pay about a second of fixed costs (two state stores committed), twice that on a machine that runs
    # other Spark jobs beside it (CI): an 8 s trigger keeps them a bounded share either way.
    spec = orders("healthy", tmp_path, master="local[2]", state_partitions=2, trigger_interval_s=8.0)
    writer = OrderWriter(tmp_path / "healthy" / "in")
    writer.write(2)
    scaling = build_scaling_assets(streams=["healthy"], policy_config=POLICY)
    sensor = build_scaling_sensor(stream="healthy", scaling=scaling, minimum_interval_seconds=1)
    with instance_for_test() as instance, writer.keep_writing(every_s=8.0):
        start(supervisor, spec, instance)
        wait_until(lambda: batches(supervisor, "healthy") >= 5, timeout_s=150, what="five batches")
        result = tick(sensor, supervisor, instance)
        assert not result.run_requests
        message = result.skip_reason.skip_message
        # In band, or over-provisioned and waiting to scale down, or a passing high-utilization batch or a file landing
        # after its trigger, which DS2 says the cores in place sustain: a hold, with its reason either way.
        assert message.startswith("healthy: ") and any(
            reason in message for reason in ("in band", "scale-down waits", "wanted, but DS2")
        ), message


def test_an_unknown_backlog_is_said_on_every_tick(supervisor, tmp_path):
    spec = StreamSpec(
        name="opaque",
        entrypoint="tests.user_streams.opaque:ticks",
        trigger_interval_s=0.5,
        options={"output_dir": str(tmp_path / "opaque-out")},
    )
    scaling = build_scaling_assets(streams=["opaque"], policy_config=POLICY)
    sensor = build_scaling_sensor(stream="opaque", scaling=scaling, minimum_interval_seconds=1)
    with instance_for_test() as instance:
        start(supervisor, spec, instance)
        wait_until(lambda: batches(supervisor, "opaque") >= 5, timeout_s=150, what="five batches")
        first = tick(sensor, supervisor, instance)
        before = batches(supervisor, "opaque")
        wait_until(lambda: batches(supervisor, "opaque") > before, what="another batch")
        second = tick(sensor, supervisor, instance, first.cursor)
    for result in (first, second):
        assert not result.run_requests
        message = result.skip_reason.skip_message
        assert "backlog unknown" in message and "not counters" in message, message
    assert supervisor.status("opaque")["backlog_unknown"]
    # Its offsets cannot be replayed either: the replay strategy is refused at preflight, and nothing is touched.
    stream = DriverStream(supervisor, "opaque")
    plan = ExecutionPlan.of(stream.spec()).model_dump()
    plan["partitioning"]["state_partitions"] = 8
    reconfigurer = Reconfigurer(stream, AuditLedger(default_ledger_url(supervisor.home)), strategy="replay")
    with pytest.raises(
        ReconfigurationRefused,
        match=r"the replay strategy cannot rebuild the state of stream 'opaque': "
        r"python source .* cannot replay from logged offsets",
    ):
        reconfigurer.run(plan)
    assert supervisor.status("opaque")["state"] == "running"
