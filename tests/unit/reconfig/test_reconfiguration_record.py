"""A reconfiguration's final ledger record, read once into a typed record (what the closed loop reports)."""

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan
from dagster_reconf.core.reconfig.reconfiguration import ReconfigurationRecord
from dagster_reconf.core.spec import StreamSpec


def test_finished_and_refused_reconfigurations_read_as_typed_records(tmp_path):
    ledger = AuditLedger(default_ledger_url(tmp_path))
    spec = StreamSpec(name="orders", entrypoint="my_pkg.streams:orders", master="local[1]", state_partitions=2)
    current = ExecutionPlan.of(spec)
    target = ExecutionPlan.of(spec.model_copy(update={"master": "local[4]", "state_partitions": 4}))
    ledger.append(stream="orders", kind="reconfiguration.refused", payload={"problems": ["stream is stopped"]})
    for step in ("pause", "resume"):
        ledger.append(stream="orders", kind="step.end", step=step, reconfiguration_id="rc-1", payload={"seconds": 1.0})
    ledger.append(
        stream="orders",
        kind="reconfiguration.finished",
        reconfiguration_id="rc-1",
        payload={
            "outcome": "succeeded",
            "plan_hash": target.plan_hash,
            "current": current.model_dump(),
            "target": target.model_dump(),
            "actions": [{"knob": "state_partitions", "before": 2, "after": 4}, {"knob": "master"}],
            "observation": {"downtime_s": 3.5, "catch_up_s": 7.0, "max_event_latency_s": 9.0},
            "verification": {"ok": True},
            "trigger": {"run_id": "run-9"},
            "timings": {"pause": 1.0},
            "steps": {"pause": {"handover": {"driver_pid": 42}}},
        },
    )
    refused, finished = ReconfigurationRecord.read(ledger, "orders")
    assert (refused.outcome, refused.problems, refused.id) == ("refused", ["stream is stopped"], None)
    assert finished.id == "rc-1" and finished.outcome == "succeeded" and finished.run_id == "run-9"
    assert (finished.current, finished.target) == (current, target)
    assert finished.actions == ["state_partitions", "master"] and finished.handed_over and finished.verified is True
    assert (finished.downtime_s, finished.catch_up_s, finished.max_event_latency_s) == (3.5, 7.0, 9.0)
    assert finished.paused_at is not None and finished.resumed_at >= finished.paused_at
    assert ReconfigurationRecord.read(ledger, "orders", since=finished.recorded_at + 1) == []
    ledger.dispose()


def test_step_results_read_back_what_was_journaled():
    from dagster_reconf.core.reconfig.step_results import PauseResult, PrepareResult, RecentPace

    pace = RecentPace(120.0, batches=20, offered_events_per_s=400.0, batch_s=0.8, seconds_per_batch=1.0)
    prepared = PrepareResult(history=pace, baseline={"batch_id": 7}, standby={"pid": 4242})
    journaled = prepared.to_record()
    assert "precopy" not in journaled and journaled["history"]["batch_s"] == 0.8
    assert PrepareResult.from_record(journaled) == prepared and prepared.standby_pid == 4242
    assert (
        PrepareResult.from_record({"history": pace.to_record(), "standby": {"failed": "no room"}}).standby_pid is None
    )
    paused = PauseResult.from_record(
        {"paused_at": 1.5, "generation": 2, "batch_id": 7, "attempts": 1, "handover": {"driver_pid": 9}}
    )
    assert paused == PauseResult(1.5, 2, 7, {"driver_pid": 9}) and paused.handed_over
