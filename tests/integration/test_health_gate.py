"""The health gate: a reconfiguration whose resumed stream fails in its first batch is never called a success. It
rolls back to the checkpoint and settings from before the pause, ends ``failed_after_resume`` with Spark's error,
and the stream runs again as it was, nothing lost. Every failure of the query, in the gate or later, is an incident
on the audit record."""

import pytest

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, Reconfigurer
from dagster_reconf.core.reconfig.incidents import record_stream_incidents
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.paths import StreamPaths

from .conftest import wait_until

pytestmark = pytest.mark.spark


def committed(runtime: StreamRuntime) -> int:
    batch = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    return -1 if batch is None else batch


def test_a_stream_that_fails_after_the_resume_is_rolled_back_and_recorded(spark, tmp_path):
    output = tmp_path / "out"
    spec = StreamSpec(
        name="bad-deploy",
        entrypoint="tests.user_streams.bad_deploy:values",
        options={"output_dir": str(output), "fail_marker": str(tmp_path / "disk-full")},
        state_partitions=2,
        trigger_interval_s=0.5,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", spec.name), spark=spark)
    runtime.start()
    ledger = AuditLedger(default_ledger_url(runtime.paths.home))
    try:
        wait_until(lambda: committed(runtime) >= 1, what="two batches")
        plan = ExecutionPlan.of(runtime.spec).model_dump()
        plan["partitioning"]["state_partitions"] = 3  # a migration, then the new code
        plan["logic"]["code_version"] = "2"
        result = Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=30).run(plan)

        assert result.outcome == "failed_after_resume", (result.outcome, result.results.get("observe"))
        assert "version 2 cannot write batch" in result.reason and "the resumed query failed" in result.reason
        assert result.observation.health["verdict"] == "failed"
        # back as it was: the old code, the old state partitions, the checkpoint from before the pause
        assert runtime.spec.code_version == "1" and runtime.spec.state_partitions == 2
        assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 2
        back = committed(runtime)
        wait_until(lambda: committed(runtime) >= back + 2, what="batches after the rollback")
        assert runtime.is_active and runtime.status()["state"] == "running"
        (finished,) = ledger.records(reconfiguration_id=result.id, kinds=["reconfiguration.finished"])
        assert finished.payload["outcome"] == "failed_after_resume" and "version 2" in finished.payload["reason"]
        assert ledger.lock("bad-deploy") is None, "the stream is free for the next plan"

        # Later, a failure nobody planned: it is in status and, once anyone looks, on the audit record (once).
        (tmp_path / "disk-full").touch()
        wait_until(lambda: runtime.status()["state"] == "failed", what="the query to fail")
        assert "the disk under" in runtime.status()["failure"]
        handle = LocalStream(runtime)
        gate, later = record_stream_incidents(ledger, handle)
        assert gate.kind == later.kind == "query_failed" and gate.payload["key"] != later.payload["key"]
        assert "version 2 cannot write batch" in gate.payload["error"], gate.payload
        assert later.payload["error"].endswith(f"the disk under {output} is full"), later.payload
        assert "Traceback" in later.payload["trace"] and ledger.verify().ok
        assert record_stream_incidents(ledger, handle) == [], "looking again records nothing twice"
        (tmp_path / "disk-full").unlink()  # the disk is freed: the stop finishes the batch that failed
    finally:
        runtime.shutdown()
    values = [row.value for row in spark.read.json(str(output)).select("value").collect()]
    assert values and len(values) == len(set(values)) == max(values) + 1, "nothing lost, nothing twice"


def test_the_same_plan_started_again_while_the_first_run_migrates_is_refused(spark, tmp_path):
    import threading

    from dagster_reconf.core.reconfig import ReconfigurationRefused

    spec = StreamSpec(
        name="race",
        entrypoint="tests.user_streams.bad_deploy:values",
        options={"output_dir": str(tmp_path / "out")},
        state_partitions=2,
        trigger_interval_s=0.5,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", spec.name), spark=spark)
    runtime.start()
    ledger = AuditLedger(default_ledger_url(runtime.paths.home))
    second: list[object] = []
    try:
        wait_until(lambda: committed(runtime) >= 1, what="two batches")
        plan = ExecutionPlan.of(runtime.spec).model_dump()
        plan["partitioning"]["state_partitions"] = 3

        def second_run(step: str) -> None:
            if step != "pause":
                return

            def run() -> None:  # another thread, as a second Dagster run or CLI call would be
                try:
                    second.append(Reconfigurer(LocalStream(runtime), ledger).run(plan))
                except ReconfigurationRefused as exc:
                    second.append(exc)

            thread = threading.Thread(target=run)
            thread.start()
            thread.join(60)

        first = Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=30, after_step=second_run).run(plan)
        (refused,) = second
        assert isinstance(refused, ReconfigurationRefused), refused
        assert "whose step runs in process" in str(refused) and first.id in str(refused)
        assert first.outcome == "succeeded" and first.verification.ok
        assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 3 and runtime.is_active
        assert [r.kind for r in ledger.records(kinds=["reconfiguration.resumed"])] == [], "never continued beside it"
        runtime.stop_at_batch_boundary()
    finally:
        runtime.shutdown()
