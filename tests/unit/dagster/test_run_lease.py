"""One Dagster run at a time reconfigures a stream: a run whose preflight finds another run of it in flight applies
nothing, whatever the lease says (a hand-off between ops can outlast it); a re-execution of the holder goes on."""

import dagster as dg

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.dagster.reconfiguration_assets import ROOT_RUN_TAG, RUN_HOLDER, _other_run_in_flight

STREAMS = dg.StaticPartitionsDefinition(["orders"])


def finds(instance: dg.DagsterInstance, ledger: AuditLedger, tags: dict[str, str] | None = None) -> str | None:
    @dg.op
    def look(context: dg.OpExecutionContext) -> str:
        return _other_run_in_flight(context, ledger) or ""

    @dg.job(partitions_def=STREAMS)
    def probe():
        look()

    result = probe.execute_in_process(instance=instance, partition_key="orders", tags=tags or {})
    return result.output_for_node("look") or None


def add_run(instance: dg.DagsterInstance, run_id: str, status: dg.DagsterRunStatus, tags=None) -> None:
    instance.add_run(dg.DagsterRun(job_name="stream_configuration", run_id=run_id, status=status, tags=tags or {}))


def test_another_run_in_flight_is_found_and_a_finished_one_is_not(tmp_path):
    ledger = AuditLedger(default_ledger_url(tmp_path))
    with dg.instance_for_test() as instance:
        assert finds(instance, ledger) is None, "no lock: nothing holds the stream"
        add_run(instance, "first", dg.DagsterRunStatus.STARTED)
        ledger.acquire_lock(
            stream="orders", reconfiguration_id="r1", plan_hash="p", holder=f"{RUN_HOLDER}first", owner="host:1:1/1"
        )
        assert finds(instance, ledger) == "first"
        instance.report_run_failed(instance.get_run_by_id("first"))
        assert finds(instance, ledger) is None, "the holder failed: a new run continues its reconfiguration"


def test_a_re_execution_of_the_holder_in_flight_holds_the_stream(tmp_path):
    ledger = AuditLedger(default_ledger_url(tmp_path))
    with dg.instance_for_test() as instance:
        add_run(instance, "first", dg.DagsterRunStatus.FAILURE)
        ledger.acquire_lock(
            stream="orders", reconfiguration_id="r1", plan_hash="p", holder=f"{RUN_HOLDER}first", owner="host:1:1/1"
        )
        assert finds(instance, ledger) is None
        add_run(instance, "retry", dg.DagsterRunStatus.STARTED, {ROOT_RUN_TAG: "first"})
        assert finds(instance, ledger) == "retry", "a re-execution of the holder in flight holds the stream"
