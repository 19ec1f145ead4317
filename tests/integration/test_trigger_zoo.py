"""A trigger zoo on real Spark: a user's stream that sets each trigger kind on its own writer. Every kind is honoured
(the running query's trigger is the user's) or refused at start with its reason before any query runs; none is
replaced. A plan that would change a trigger the definition sets is refused at preflight, and the CLI says a refusal
where the user starts the stream."""

import json

import pytest

from dagster_reconf.cli import main as reconf
from dagster_reconf.core.errors import StreamStartError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.paths import StreamPaths

from .conftest import wait_until

pytestmark = pytest.mark.spark

REFUSED = [
    ("availableNow", "availableNow=True), a run that stops once it has read what is there"),
    ("once", "once=True), a run that stops once it has read what is there"),
    ("realTime=5 seconds", "realTime='5 seconds'): real-time mode"),
    ("continuous=2 seconds", "continuous='2 seconds'): continuous processing (experimental)"),
]


def runtime_for(spark, tmp_path, trigger: str, **fields) -> StreamRuntime:
    spec = StreamSpec.parse(
        {
            "name": "mine",
            "entrypoint": "tests.user_streams.triggers:values",
            "options": {"trigger": trigger, "output_dir": str(tmp_path / "out")},
            "state_partitions": 2,
            **fields,
        }
    )
    return StreamRuntime(spec, StreamPaths(tmp_path / "home", spec.name), spark=spark)


def running_trigger(runtime: StreamRuntime) -> str:
    """The trigger Spark runs the query under (the JVM's StreamExecution), as Spark prints it."""
    return str(runtime.query._jsq.streamingQuery().trigger().toString())


@pytest.mark.parametrize(
    ("trigger", "fields", "runs_under", "spec_says"),
    [
        ("none", {}, "ProcessingTimeTrigger(1000)", (1.0, "default")),
        ("none", {"trigger_interval_s": 3}, "ProcessingTimeTrigger(3000)", (3.0, "spec")),
        ("processingTime=7 seconds", {}, "ProcessingTimeTrigger(7000)", (7.0, "definition")),
        ("processingTime=7 seconds", {"trigger_interval_s": 7}, "ProcessingTimeTrigger(7000)", (7.0, "definition")),
    ],
)
def test_a_trigger_the_control_plane_can_run_is_honoured(spark, tmp_path, trigger, fields, runs_under, spec_says):
    runtime = runtime_for(spark, tmp_path, trigger, **fields)
    try:
        runtime.start()
        assert running_trigger(runtime) == runs_under
        assert (runtime.spec.trigger_interval_s, runtime.spec.trigger_from) == spec_says
        kept = StreamSpec.parse(json.loads(runtime.paths.spec.read_text()))
        assert (kept.trigger_interval_s, kept.trigger_from) == spec_says  # what status and a restart read
    finally:
        runtime.shutdown()


@pytest.mark.parametrize(("trigger", "reason"), REFUSED)
def test_a_trigger_the_control_plane_cannot_manage_is_refused_at_start(spark, tmp_path, trigger, reason):
    runtime = runtime_for(spark, tmp_path, trigger)
    with pytest.raises(StreamStartError, match="definition tests.user_streams.triggers:values sets") as refused:
        runtime.start()
    assert reason in str(refused.value)
    assert spark.streams.active == [] and checkpoint_facts(runtime.paths.checkpoint).last_offset_batch is None


def test_a_spec_with_another_interval_than_the_definitions_is_refused_naming_both(spark, tmp_path):
    runtime = runtime_for(spark, tmp_path, "processingTime=7 seconds", trigger_interval_s=2)
    with pytest.raises(StreamStartError, match=r"processingTime='7 seconds'\) and its spec trigger_interval_s=2"):
        runtime.start()
    assert spark.streams.active == []


def test_a_plan_that_would_change_the_definitions_trigger_is_refused_at_preflight(spark, tmp_path):
    runtime = runtime_for(spark, tmp_path, "processingTime=2 seconds")
    try:
        runtime.start()
        wait_until(
            lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= 1, 60, "2 batches"
        )
        plan = ExecutionPlan.of(runtime.spec).model_dump()
        plan["partitioning"]["trigger_interval_s"] = 4.0
        ledger = AuditLedger(default_ledger_url(tmp_path / "home"))
        with pytest.raises(ReconfigurationRefused, match=r"set in its definition \(processingTime 2 s\)"):
            Reconfigurer(LocalStream(runtime), ledger).run(plan, trigger={"kind": "zoo"})
        assert running_trigger(runtime) == "ProcessingTimeTrigger(2000)" and runtime.is_active
    finally:
        runtime.shutdown()


def test_the_cli_says_why_a_stream_in_the_users_own_module_is_refused(tmp_path, capsys):
    """As a new user starts it: `reconf stream start` with the definition in its own module; a driver of its own."""
    args = ["--home", str(tmp_path / "home"), "stream", "start", "mine"]
    args += ["--entrypoint", "tests.user_streams.triggers:values", "--option", "trigger=availableNow"]
    args += ["--option", f"output_dir={tmp_path / 'out'}"]
    assert reconf(args) != 0
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())
    assert "sets trigger(availableNow=True)" in said and "a Dagster job" in said, said
