"""The reconfiguration job end to end in Dagster: ds2_plans -> stream_configuration (the graph of
reconfiguration ops) on a supervised stream, a plan given in run config, recommend-only, a refused
plan that fails the run, and the run-failure sensor that records it in the audit ledger."""

import json

import pytest
from dagster import build_run_status_sensor_context, instance_for_test, materialize

from dagster_reconf import (
    AuditLedgerResource,
    ExecutionPlan,
    StreamRuntimeResource,
    build_reconfiguration_failure_sensor,
    build_scaling_assets,
)
from dagster_reconf.core.ledger import AuditLedger
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.dagster.constants import RECONFIGURATION_TAG
from dagster_reconf.dagster.run_config import ExecutionPlanConfig, ReconfigureConfig
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import wait_until

pytestmark = pytest.mark.spark

STREAM = "wordcount"


@pytest.fixture(name="supervisor")
def supervisor_fixture(tmp_path):
    supervisor = StreamSupervisor(tmp_path / "home")
    supervisor.start(
        bundled_spec(
            STREAM,
            "wordcount",
            rate=500,
            source_partitions=1,
            state_partitions=4,
            trigger_interval_s=0.5,
            vocabulary=1000,
        )
    )
    wait_until(
        lambda: (checkpoint_facts(supervisor.paths(STREAM).checkpoint).last_committed_batch or -1) >= 1,
        what="two batches",
    )
    yield supervisor
    if supervisor.driver_info(STREAM) is not None:
        supervisor.stop(STREAM, timeout_s=30)


def plan(supervisor: StreamSupervisor, **changes) -> ExecutionPlanConfig:
    """The plan in force with ``changes``, as the typed config the launchpad shows."""
    spec = StreamSpec.parse(json.loads(supervisor.paths(STREAM).spec.read_text()))
    return ExecutionPlanConfig.of(ExecutionPlan.of(spec)).model_copy(update=changes)


def run_config(given: ExecutionPlanConfig, recommend_only: bool = False) -> dict:
    return ReconfigureConfig(plan=given, recommend_only=recommend_only).run_config()


def test_reconfiguration_job_migrates_state_and_records_it(supervisor):
    scaling = build_scaling_assets(streams=[STREAM], observe_timeout_s=10)
    ledger_url = f"sqlite:///{supervisor.home / 'ledger.db'}"
    resources = {
        "streams": StreamRuntimeResource(home=str(supervisor.home)),
        "audit_ledger": AuditLedgerResource(url=ledger_url),
    }
    failures = build_reconfiguration_failure_sensor(job=scaling.job)
    with instance_for_test() as instance:
        assets = [scaling.plans, scaling.configuration]
        result = materialize(
            [*assets, *scaling.checks],
            partition_key=STREAM,
            run_config=run_config(plan(supervisor, state_partitions=6)),
            instance=instance,
            resources=resources,
        )
        assert result.success
        (materialization,) = result.asset_materializations_for_node("stream_configuration")
        metadata = materialization.metadata
        assert metadata["outcome"].value == "succeeded" and metadata["verified"].value is True
        assert any("state_migration" in str(row.data) for row in metadata["actions"].records)
        assert any("0/default" in str(row.data) for row in metadata["verification"].records)
        (verified,) = result.get_asset_check_evaluations()
        assert verified.check_name == "state_verified" and verified.passed and verified.partition == STREAM
        assert metadata["step_seconds"].records and {c.name for c in metadata["plan"].schema.columns} == {
            "setting",
            "value",
        }
        assert metadata["downtime_s"].value > 0
        assert checkpoint_facts(supervisor.paths(STREAM).checkpoint).state_partitions == 6
        assert supervisor.status(STREAM)["state"] == "running"
        reconfiguration_id = metadata["reconfiguration_id"].value
        assert instance.get_run_by_id(result.run_id).tags[RECONFIGURATION_TAG] == reconfiguration_id
        ledger = AuditLedger(ledger_url)
        finished = ledger.records(reconfiguration_id=reconfiguration_id, kinds=["reconfiguration.finished"])
        assert finished[0].payload["trigger"]["run_id"] == result.run_id
        assert ledger.verify(expect_head=metadata["ledger_head"].value).ok
        steps = [r.step for r in ledger.records(reconfiguration_id=reconfiguration_id, kinds=["step.end"])]
        assert steps == ["preflight", "prepare", "pause", "migrate", "verify", "resume", "observe", "record"]
        # The stopped stream's steps ran back to back in the pause op; the ops after it found them journaled.
        logs = {
            step: [
                e.user_message for e in instance.all_logs(result.run_id) if e.step_key == f"stream_configuration.{step}"
            ]
            for step in ("pause", "migrate", "resume")
        }
        assert any("resume (reconfiguration" in m for m in logs["pause"])
        assert any("migrate already done" in m for m in logs["migrate"]) and any(
            "resume already done" in m for m in logs["resume"]
        )

        recommend = materialize(
            assets,
            partition_key=STREAM,
            instance=instance,
            resources=resources,
            run_config=run_config(plan(supervisor, state_partitions=3), recommend_only=True),
        )
        assert recommend.success
        note = recommend.asset_materializations_for_node("stream_configuration")[0].metadata
        assert note["applied"].value is False
        assert checkpoint_facts(supervisor.paths(STREAM).checkpoint).state_partitions == 6

        refused = materialize(
            assets,
            partition_key=STREAM,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            run_config=run_config(
                plan(supervisor, state_partitions=None, state_partitions_by_operator={"0": 2, "5": 2})
            ),
        )
        assert not refused.success
        failure = refused.get_run_failure_event()
        context = build_run_status_sensor_context(
            sensor_name=failures.name,
            dagster_event=failure,
            dagster_instance=instance,
            dagster_run=refused.dagster_run,
            resources={"audit_ledger": resources["audit_ledger"]},
        )
        failures(context.for_run_failure())
        (recorded,) = ledger.records(stream=STREAM, kinds=["run.failed"])
        assert recorded.payload["run_id"] == refused.run_id and recorded.reconfiguration_id
        refusal = ledger.records(reconfiguration_id=recorded.reconfiguration_id, kinds=["reconfiguration.finished"])[0]
        assert (
            refusal.payload["outcome"] == "refused"
            and "unknown stateful operator(s) ['5']" in refusal.payload["problems"][0]
        )
        assert checkpoint_facts(supervisor.paths(STREAM).checkpoint).state_partitions == 6, (
            "a refused plan changes nothing"
        )
