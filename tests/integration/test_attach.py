"""Attached streams: Spark applications the control plane never started, observed from the event logs they write.

Applications run here as any team's own would (a SparkSession, its queries, an event log directory), then
get attached: two queries in one application, a driver restarted (a second application in the same
directory), a query that stops, an application still running, and the same logs read from an fsspec URL.
Each query is its own stream; its traces, CP and DS2 plans come from the logs, and applying a plan is refused.
"""

import json
import re
import shutil
import time

import fsspec
import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    AssetObservation,
    MultiPartitionKey,
    build_sensor_context,
    instance_for_test,
    materialize,
)

from dagster_reconf import (
    AuditLedgerResource,
    ReconfTranslator,
    StreamRuntimeResource,
    build_scaling_assets,
    build_scaling_sensor,
    build_streams_sensor,
    build_trace_assets,
)
from dagster_reconf.cli import main as reconf
from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.spark.session import build_spark_session
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import MetricsStore, progress_frame
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.traces.attach import AttachSpec, attach

from .conftest import wait_until

pytestmark = pytest.mark.spark


def application(name: str, event_logs, partitions: int = 3):
    """A team's own SparkSession, writing its event log where they keep them."""
    spec = StreamSpec(name=name, entrypoint=None, master="local[2]", state_partitions=partitions)
    return build_spark_session(spec, event_logs)


def counts(spark, name: str, checkpoint, rows_per_second: int = 200, trigger: str = "500 milliseconds"):
    """A stateful query of the team's: counts per key of the rate source."""
    rows = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    return (
        rows.selectExpr("value % 7 AS key")
        .groupBy("key")
        .count()
        .writeStream.queryName(name)
        .outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=trigger)
        .start()
    )


def batches(query, n: int) -> None:
    wait_until(
        lambda: len(query.recentProgress) >= n and query.recentProgress[-1]["numInputRows"] > 0, what=f"{n} batches"
    )


@pytest.fixture(name="logs", scope="module")
def logs_fixture(tmp_path_factory):
    """Two directories of event logs: one application running queries alpha and beta (alpha stops first), and
    query gamma run by two applications one after the other (a driver restart), the second still running."""
    base = tmp_path_factory.mktemp("apps")
    two, restarted = base / "two-queries", base / "restarted"
    two.mkdir()
    restarted.mkdir()
    spark = application("orders-app", two)
    alpha, beta = counts(spark, "alpha", base / "ck-alpha"), counts(spark, "beta", base / "ck-beta", 400)
    batches(alpha, 4)
    batches(beta, 4)
    alpha.stop()
    batches(beta, len(beta.recentProgress) + 2)
    beta.stop()
    spark.stop()
    spark = application("gamma-app", restarted)
    gamma = counts(spark, "gamma", base / "ck-gamma", 50, "1 second")
    batches(gamma, 3)
    gamma.stop()
    spark.stop()
    spark = application("gamma-app", restarted)  # the driver restarted: a new application, the same checkpoint
    gamma = counts(spark, "gamma", base / "ck-gamma", 50, "1 second")
    batches(gamma, 4)
    yield {"two": two, "restarted": restarted, "base": base, "gamma": gamma}
    gamma.stop()
    spark.stop()


def progress(home, name):
    return progress_frame(MetricsStore(StreamPaths(home, name).metrics).read(0)[0])


def test_each_query_of_one_application_is_its_own_stream(logs, tmp_path):
    home = tmp_path / "home"
    alpha = attach(home, AttachSpec(name="alpha", event_logs=str(logs["two"]), query="alpha"))
    beta = attach(home, AttachSpec(name="beta", event_logs=str(logs["two"]), query="beta"))
    assert alpha["query_name"] == "alpha" and alpha["progress"] >= 4 and alpha["ignored_queries"] == ["beta"]
    assert beta["progress"] > alpha["progress"] - 2 and beta["ignored_queries"] == ["alpha"]
    frames = {name: progress(home, name) for name in ("alpha", "beta")}
    assert frames["alpha"]["query_id"].nunique() == 1 and frames["beta"]["query_id"].nunique() == 1
    assert set(frames["alpha"]["query_id"]).isdisjoint(frames["beta"]["query_id"])
    # rate source offsets: events and backlog in events, not "unknown"
    assert (frames["beta"]["events"] > 0).any() and frames["beta"]["backlog_events"].notna().all()
    records, _ = MetricsStore(StreamPaths(home, "alpha").metrics).read(0)
    assert [r["event"] for r in records if r["kind"] == "lifecycle"][-1] == "query_terminated"  # alpha stopped
    spec = StreamSpec.parse(json.loads(StreamPaths(home, "alpha").spec.read_text()))
    assert spec.entrypoint is None and spec.master == "local[2]" and spec.state_partitions == 3
    given = attach(home, AttachSpec(name="alpha", event_logs=str(logs["two"]), query="alpha", trigger_interval_s=0.5))
    assert given["progress"] == 0  # the same location and filter: nothing new to read
    assert StreamSpec.parse(json.loads(StreamPaths(home, "alpha").spec.read_text())).trigger_interval_s == 0.5
    # Without a filter the stream is the first query seen, and the other is said, not mixed in.
    unfiltered = attach(home, AttachSpec(name="first", event_logs=str(logs["two"])))
    assert unfiltered["query_name"] in ("alpha", "beta") and len(unfiltered["ignored_queries"]) == 1


def test_a_restarted_driver_continues_the_stream_and_a_running_one_is_read_incrementally(logs, tmp_path):
    home = tmp_path / "home"
    first = attach(home, AttachSpec(name="gamma", event_logs=str(logs["restarted"]), application="reconf-gamma-app"))
    assert len(first["applications"]) == 2 and first["ignored_queries"] == []
    frame = progress(home, "gamma")
    assert frame["batch_id"].is_monotonic_increasing and frame["query_id"].nunique() == 1  # one query, two apps
    records, _ = MetricsStore(StreamPaths(home, "gamma").metrics).read(0)
    assert [r["event"] for r in records if r.get("event") == "started"] == ["started", "started"]
    spec = StreamSpec.parse(json.loads(StreamPaths(home, "gamma").spec.read_text()))
    assert 0.9 <= spec.trigger_interval_s <= 1.1  # not in the log: inferred from the batches' start times
    running = logs["gamma"]
    seen = len(running.recentProgress)
    wait_until(lambda: len(running.recentProgress) >= seen + 2, what="two more batches")
    time.sleep(1.0)  # the event log is flushed on Spark's own schedule
    wait_until(
        lambda: StreamSupervisor(home).status("gamma")["batch_id"] > frame["batch_id"].max(),
        timeout_s=30,
        what="new batches read from the running application's log",
    )
    status = StreamSupervisor(home).status("gamma")
    assert status["state"] == "attached" and status["source_kinds"] == "rate"


def test_logs_on_an_fsspec_url_and_bad_locations(logs, tmp_path):
    fs = fsspec.filesystem("memory")
    for path in (p for p in logs["two"].rglob("*") if p.is_file()):
        fs.pipe(f"/attached-test/two/{path.relative_to(logs['two']).as_posix()}", path.read_bytes())
    found = attach(tmp_path / "home", AttachSpec(name="beta", event_logs="memory://attached-test/two", query="beta"))
    assert found["progress"] >= 4
    with pytest.raises(SpecError, match="event log directory /nowhere does not exist"):
        attach(tmp_path / "home", AttachSpec(name="ghost", event_logs="/nowhere"))
    with pytest.raises(SpecError, match="event_logs: .*is not a URL"):
        AttachSpec.parse({"name": "x", "event_logs": "relative/dir"})
    assert (
        reconf(
            [
                "--home",
                str(tmp_path / "home"),
                "stream",
                "attach",
                "cli-beta",
                "--event-logs",
                str(logs["two"]),
                "--query",
                "beta",
            ]
        )
        == 0
    )


def test_traces_cp_and_a_ds2_recommendation_for_an_attached_stream_and_no_apply(logs, tmp_path):
    home = tmp_path / "home"
    attach(home, AttachSpec(name="beta", event_logs=str(logs["two"]), query="beta"))
    resources = {"streams": StreamRuntimeResource(home=str(home)), "audit_ledger": AuditLedgerResource(home=str(home))}
    traces = build_trace_assets(streams=["beta"], window_minutes=5)
    scaling = build_scaling_assets(
        streams=["beta"],
        policy_config={"window_batches": 3, "warmup_batches": 1, "stabilization_s": 0, "scale_down_delay_s": 0},
    )
    frame = progress(home, "beta")
    window = traces.windows.key(frame["timestamp"].iloc[-1].timestamp())
    with instance_for_test() as instance:
        sensor = build_scaling_sensor(stream="beta", scaling=scaling, traces=traces)
        tick = sensor(build_sensor_context(instance=instance, resources=resources))
        assert not tick.run_requests and tick.skip_reason.skip_message.startswith("beta: ")
        # The trace windows are those its logged batches ran in (its application ended: none for now).
        (registration,) = tick.dynamic_partitions_requests
        assert registration.partition_keys == sorted({traces.windows.key(t.timestamp()) for t in frame["timestamp"]})
        instance.add_dynamic_partitions(registration.partitions_def_name, registration.partition_keys)
        result = materialize(
            [traces.snapshots, traces.summaries],
            partition_key=MultiPartitionKey({"stream": "beta", "window": window}),
            resources=resources,
            instance=instance,
        )
        assert result.success
        snapshot = result.asset_materializations_for_node("trace_snapshots")[0].metadata
        assert snapshot["activities"].value > 0  # only beta's query: alpha's jobs in the same log are left out
        assert result.asset_materializations_for_node("cp_summaries")[0].metadata["cp_sum"].value == pytest.approx(1.0)
        plans = materialize([scaling.plans], partition_key="beta", resources=resources, instance=instance)
        assert plans.success
        decision = instance.get_latest_materialization_event(AssetKey("ds2_plans")).asset_materialization.metadata
        assert decision["decision"].value  # a plan or why not, from the log alone
    plan = ExecutionPlan.of(DriverStream(StreamSupervisor(home), "beta").spec()).model_dump()
    plan["partitioning"]["state_partitions"] = 6
    with pytest.raises(ReconfigurationRefused, match=r"stream 'beta' is attached: .*cannot apply one"):
        Reconfigurer(DriverStream(StreamSupervisor(home), "beta"), AuditLedger(default_ledger_url(home))).run(plan)
    with pytest.raises(SpecError, match="is attached: dagster-reconf observes it"):
        StreamSupervisor(home).start(StreamSpec.parse(json.loads(StreamPaths(home, "beta").spec.read_text())))
    shutil.rmtree(home)


def test_reconf_plan_advises_a_finished_application_s_next_run_and_decides_for_a_running_one(logs, tmp_path, capsys):
    """``reconf plan``: beta's application ended (advice for its next run, from its run's last window, labelled);
    gamma's still runs (a decision now). Status says when beta's query ended; --apply is refused on both."""
    home = tmp_path / "home"
    attach(home, AttachSpec(name="beta", event_logs=str(logs["two"]), query="beta"))
    attach(home, AttachSpec(name="gamma", event_logs=str(logs["restarted"]), query="gamma"))
    loose = ["--set", "window_batches=3", "--set", "warmup_batches=1", "--set", "stabilization_s=0"]

    def plan(name: str, *extra: str) -> dict:
        capsys.readouterr()
        assert reconf(["--home", str(home), "plan", name, "--json", *loose, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    ended = plan("beta")
    last_batch = int(progress(home, "beta")["batch_id"].max())
    assert ended["for_next_run"] and ended["recommend_only"] and ended["attached"]
    assert ended["reason"].startswith("for the next run: ") and "terminated" not in ended["reason"], ended["reason"]
    assert ended["query_ended_at"] is not None and ended["query_exception"] is None
    assert ended["evidence"]["batches"] >= 3 and ended["evidence"]["last_batch"] == last_batch
    assert ended["current"]["state_partitions"] == 3 and ended["action"] in ("hold", "scale_up", "scale_down")
    assert reconf(["--home", str(home), "plan", "beta", *loose]) == 0
    said = capsys.readouterr().out
    assert "advice for the next run" in said
    assert re.search(r"evidence: configuration started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", said), said
    assert reconf(["--home", str(home), "stream", "status", "beta", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["query_ended"]["at"] == pytest.approx(progress(home, "beta")["timestamp"].max().timestamp(), abs=30)

    running = plan("gamma")
    assert not running["for_next_run"] and running["query_ended_at"] is None and running["attached"]
    assert running["evidence"]["batches"] >= 1 and not running["reason"].startswith("for the next run")
    for name in ("beta", "gamma"):
        assert reconf(["--home", str(home), "plan", name, "--apply", *loose]) == 2
        assert "is attached (observed from its event logs)" in capsys.readouterr().out
    assert reconf(["--home", str(home), "plan", "nope"]) == 2
    assert reconf(["--home", str(home), "plan", "beta", "--set", "window_batches=1"]) == 2  # ge=2: named
    assert "window_batches" in capsys.readouterr().out


def test_one_streams_sensor_registers_observes_and_explains_every_stream(logs, tmp_path):
    """Dynamic partitions under a translator: streams appear in the home (attached, or a managed one not running),
    the tick registers them, observes the attached ones' lag and throughput, and says per stream why it asks nothing."""
    home = tmp_path / "home"
    for name in ("alpha", "beta"):
        attach(home, AttachSpec(name=name, event_logs=str(logs["two"]), query=name))
    attach(home, AttachSpec(name="gamma", event_logs=str(logs["restarted"]), query="gamma"))  # its application runs
    stopped = StreamSpec(name="stopped", entrypoint="my_streams:orders", master="local[1]", state_partitions=2)
    StreamPaths(home, "stopped").create()
    StreamPaths(home, "stopped").spec.write_text(stopped.model_dump_json())
    team = ReconfTranslator(prefix="team_a")
    traces = build_trace_assets(window_minutes=5, translator=team)
    scaling = build_scaling_assets(
        translator=team,
        policy_config={"window_batches": 3, "warmup_batches": 1, "stabilization_s": 0, "scale_down_delay_s": 3600},
    )
    sensor = build_streams_sensor(scaling=scaling, traces=traces)
    resources = {"streams": StreamRuntimeResource(home=str(home)), "audit_ledger": AuditLedgerResource(home=str(home))}
    with instance_for_test() as instance:
        first = sensor(build_sensor_context(instance=instance, resources=resources))
        registration, windows = first.dynamic_partitions_requests
        assert registration.partitions_def_name == "team_a_streams"
        assert registration.partition_keys == ["alpha", "beta", "gamma", "stopped"]
        assert windows.partitions_def_name == "team_a_trace_windows"  # the windows the logged batches ran in
        logged = {
            traces.windows.key(t.timestamp())
            for name in ("alpha", "beta", "gamma")
            for t in progress(home, name)["timestamp"]
        }
        assert set(windows.partition_keys) >= logged and windows.partition_keys == sorted(windows.partition_keys)
        observed = {e.partition: e.metadata for e in first.asset_events if isinstance(e, AssetObservation)}
        assert set(observed) == {"alpha", "beta", "gamma", "stopped"}, "every stream's page says how it is"
        assert all(e.asset_key == AssetKey(["team_a", "stream"]) for e in first.asset_events)
        assert observed["stopped"]["state"].value == "stopped" and observed["gamma"]["state"].value == "attached"
        checks = {
            (e.metadata["stream"].value, e.check_name): e
            for e in first.asset_events
            if isinstance(e, AssetCheckEvaluation)
        }
        assert {name for _, name in checks} == {"driver_alive", "query_healthy", "lag_within_band"}
        assert {stream for stream, _ in checks} == set(observed)
        stopped_alive = checks[("stopped", "driver_alive")]
        assert not stopped_alive.passed and stopped_alive.severity == AssetCheckSeverity.WARN, "stopped on purpose"
        assert checks[("gamma", "driver_alive")].passed and checks[("gamma", "query_healthy")].passed
        assert observed["beta"]["lag_events"].value >= 0 and observed["beta"]["last_batch_id"].value >= 4
        assert (
            observed["gamma"]["throughput_events_per_s"].value > 0
            and observed["gamma"]["offered_events_per_s"].value > 0
        )
        # Under load gamma may fall behind: a run for it (one per configuration and direction), never for the others.
        requested = [r for r in first.run_requests if r.job_name == scaling.job.name]
        assert {r.partition_key for r in requested} <= {"gamma"}
        for request in requested:  # the run plans from the traces; the tick read none
            assert request.run_key.startswith("gamma|started@") and request.run_key.rsplit("|", 1)[1] in (
                "scale_up",
                "scale_down",
            )
            assert not request.run_config
        for request in first.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)

        # Later ticks read from the cursor, until one requests nothing (a direction is requested once per configuration:
        # at most two); its skip reason says why for every stream.
        keys, tick = {r.run_key for r in requested}, first
        for _ in range(3):
            tick = sensor(build_sensor_context(instance=instance, cursor=tick.cursor, resources=resources))
            assert {r.partitions_def_name for r in tick.dynamic_partitions_requests} <= {windows.partitions_def_name}
            assert {e.partition for e in tick.asset_events} <= {
                "gamma"
            }  # nothing new in the finished applications' logs
            new_keys = {r.run_key for r in tick.run_requests if r.job_name == scaling.job.name}
            assert not new_keys & keys and {k.split("|")[0] for k in new_keys} <= {"gamma"}
            keys |= new_keys
            if not tick.run_requests:
                break
        said = tick.skip_reason.skip_message
        assert "stopped: not running (no driver)" in said
        for name in ("alpha", "beta"):  # their queries stopped: said, pointed at the advice for their next run
            assert f"{name}: its query ended at " in said and f"`reconf plan {name}`" in said
        gamma_says = said[said.index("gamma: ") : said.index("; stopped: ")]  # streams are said in name order
        assert any(
            reason in gamma_says
            for reason in (
                "metric window not full",
                "in band",
                "catching up",
                "caught up",  # its backlog cleared: the catch-up batches' utilization is not the steady state's
                "scale-down waits",
                "already requested for this configuration",
            )
        ), said

        # A run for a dynamic partition: DS2 decides from beta's logs, and nothing is applied to an attached stream.
        applied = materialize(scaling.assets, partition_key="beta", resources=resources, instance=instance)
        assert applied.success
        configuration = applied.asset_materializations_for_node("team_a__stream_configuration")[0].metadata
        assert configuration["applied"].value is False
    shutil.rmtree(home)
