"""Streams the control plane did not write: a user's own PySpark code over Spark's file source (and the rate
source), started by the CLI in its own driver, paused at batch boundaries while input keeps arriving,
migrated 4 -> 8 -> 3 state partitions and moved to other cores, with output equal to a batch job over the
same files; and a user's bad code, refused with clear errors and no process left behind."""

import dataclasses
import json
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, instance_for_test
from orders_example.streams import OrderWriter

from dagster_reconf import StreamRuntimeResource, build_stream_control_job
from dagster_reconf.cli import main as reconf
from dagster_reconf.core.definition import load_definition
from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, Reconfigurer
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spark.state_migrator import StreamMigrator
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.file_sink import COMPACT_INTERVAL_CONF
from dagster_reconf.core.store.paths import StreamPaths

from .conftest import drivers_under, wait_until

pytestmark = pytest.mark.spark

ORDERS = "orders_example.streams:orders"
BROKEN = "tests.user_streams.broken"


def committed(supervisor, name) -> int:
    return checkpoint_facts(supervisor.paths(name).checkpoint).last_committed_batch or -1


def test_a_file_source_stream_is_paused_migrated_and_moved_without_losing_a_row(supervisor, spark, tmp_path):
    writer = OrderWriter(tmp_path / "in")
    writer.write(4)
    output = tmp_path / "out"
    home = ["--home", str(supervisor.home)]
    assert (
        reconf(
            [
                *home,
                "stream",
                "start",
                "orders",
                "--entrypoint",
                ORDERS,
                "--option",
                f"input_dir={writer.directory}",
                "--option",
                f"output_dir={output}",
                "--state-partitions",
                "4",
                "--trigger-interval-s",
                "0.5",
                "--max-per-trigger",
                "5",
            ]
        )
        == 0
    )
    stream = DriverStream(supervisor, "orders")
    ledger = AuditLedger(default_ledger_url(supervisor.home))
    reconfigurer = Reconfigurer(stream, ledger, observe_timeout_s=20)
    with writer.keep_writing(every_s=1.0):
        wait_until(lambda: committed(supervisor, "orders") >= 2, what="two batches")
        status = supervisor.status("orders")
        assert status["source_kinds"] == "file" and status["backlog_events"] is not None  # the driver lists the files
        assert status["checkpoint"]["stateful"] and status["entrypoint"] == ORDERS

        for partitions in (8, 3):  # while files keep arriving
            plan = ExecutionPlan.of(stream.spec()).model_dump()
            plan["partitioning"]["state_partitions"] = partitions
            result = reconfigurer.run(plan, trigger={"user": "test"})
            assert result.outcome == "succeeded", result.results
            checks = result.results["preflight"]["checks"]
            assert checks["capabilities"]["pause"] and checks["capabilities"]["replay"]
            assert checks["capabilities"]["oracle"]  # the user's definition brings one
            verification = result.verification
            assert verification.ok, verification
            stores = {s["store"]: s for s in verification.stores}
            assert len(stores) == 2  # the window aggregation and dropDuplicatesWithinWatermark
            for store in stores.values():
                assert (
                    store["rows_before"] == store["rows_after"] and store["checksum_before"] == store["checksum_after"]
                )
                assert store["max_partition_id"] < partitions
            assert checkpoint_facts(stream.paths.checkpoint).state_partitions == partitions
            assert result.observation.downtime_s is not None
            # A native migration: the pause began once the batch in flight, if any, committed (at most 1.5 batches).
            assert 0 <= result.paused.boundary_wait_s <= 5.0 and result.paused.paused_at <= result.resumed.resumed_at

        # Fewer cores: a new SparkContext in the same driver, the checkpoint and its state kept.
        plan = ExecutionPlan.of(stream.spec()).model_dump()
        plan["resources"]["master"] = "local[1]"
        moved = reconfigurer.run(plan)
        assert moved.outcome == "succeeded" and supervisor.status("orders")["master"] == "local[1]"
        before = committed(supervisor, "orders")
        wait_until(lambda: committed(supervisor, "orders") > before + 1, what="batches on one core")
    # The writer has stopped: let the stream take every file, then stop it at a batch boundary.
    wait_until(
        lambda: (
            supervisor.status("orders").get("backlog_events") == 0
            and supervisor.status("orders")["checkpoint"]["committed"]
        ),
        timeout_s=180,
        what="every file read",
    )
    stopped = supervisor.stop("orders")
    assert stopped["stopped"] and "forced" not in stopped
    assert ledger.verify().ok and ledger.lock("orders") is None

    # The definition's oracle: Spark's file sink output (only what its log committed) against the batch job.
    comparison = load_definition(ORDERS).oracle(spark, supervisor.home, stream.spec())
    assert comparison.ok, comparison
    assert comparison.expected_rows > 10, "the batch job produced few rows: the check would prove little"


def test_the_rate_source_pauses_at_a_batch_boundary_and_resumes_with_new_settings(spark, tmp_path):
    output = tmp_path / "out"
    spec = StreamSpec(
        name="rates",
        entrypoint="tests.user_streams.rates:values",
        trigger_interval_s=0.5,
        options={"rows_per_second": 40, "output_dir": str(output)},
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", "rates"), spark=spark)
    built, build = [], runtime.definition.build
    runtime.definition = dataclasses.replace(
        runtime.definition, build=lambda spark, ctx: built.append(ctx.purpose) or build(spark, ctx)
    )
    runtime.warm_up()  # what a standby does: it builds the query, and its start runs that one, not a second
    runtime.start()
    assert built == ["stream"], built
    wait_until(
        lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= 3, what="four batches"
    )
    first = runtime.stop_at_batch_boundary()
    assert checkpoint_facts(runtime.paths.checkpoint).committed and not runtime.is_active
    report = runtime.restart({"trigger_interval_s": 1.0})  # (the rate source's own rate is its data: never changed)
    # New settings: built anew (a stop that finished an interrupted batch built one more for that)
    assert report["scope"] == "query" and runtime.is_active and len(built) >= 2, built
    wait_until(
        lambda: (
            (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= first.last_committed_batch + 3
        ),
        what="three batches with the new settings",
    )
    last = runtime.stop_at_batch_boundary().last_committed_batch
    facts = checkpoint_facts(runtime.paths.checkpoint, with_offsets=True)
    consumed = int(facts.end_offsets[last][0]) * 40  # the rate source's offsets are seconds: 40 rows each
    values = spark.read.parquet(str(output)).select("value").toPandas()["value"]
    assert sorted(values) == list(range(consumed)) and consumed > 100  # nothing lost, nothing twice
    wait_until(
        lambda: any(r["progress"]["batchId"] == last for r in runtime.store.progress()), what="the last progress"
    )
    assert {r["progress"]["sources"][0]["description"].split("[")[0] for r in runtime.store.progress()} == {
        "RateStreamV2"
    }


def test_spark_file_sink_keeps_running_after_migrations_that_add_batches_it_never_saw(spark, tmp_path):
    """Spark's repartition adds a batch the file sink never logs; where that batch is one the sink compacts at, the
    next compaction fails (BATCH_METADATA_NOT_FOUND) unless the log gets the entry: both kinds are filled."""
    output = tmp_path / "out"
    spark.conf.set(COMPACT_INTERVAL_CONF, "2")  # the sink compacts at every odd batch: both kinds come up quickly
    try:
        spec = StreamSpec(
            name="distinct",
            entrypoint="tests.user_streams.rates:distinct_values",
            trigger_interval_s=0.3,
            state_partitions=2,
            options={"rows_per_second": 40, "output_dir": str(output)},
        )
        runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", "distinct"), spark=spark)
        migrator = StreamMigrator(runtime)
        kinds, partitions = set(), 2

        def last_committed() -> int:
            failed = runtime.query.exception()
            assert failed is None, f"the stream failed: {str(failed).splitlines()[0]}"
            return checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1

        runtime.start()
        migrations = 0
        for attempt in range(8):  # a gap on each kind of entry (plain, compaction), each followed by two compactions
            start = last_committed()
            wait_until(lambda: last_committed() >= start + 4 + attempt % 2, what="four batches or five")
            last = runtime.stop_at_batch_boundary().last_committed_batch
            if len(kinds) == 2:
                break
            partitions = 5 - partitions  # 2 <-> 3
            migrator.migrate(partitions, "native")  # adds batch last + 1, never seen by the sink
            migrations += 1
            kinds.add("compaction" if (last + 2) % 2 == 0 else "plain")
            migrator.resume({"state_partitions": partitions})
        assert kinds == {"plain", "compaction"}
        aligned = [r for r in runtime.store.read(0)[0] if r.get("event") == "file_sink_log_aligned"]
        assert [len(r["batches"]) for r in aligned] == [1] * migrations, aligned
        facts = checkpoint_facts(runtime.paths.checkpoint, with_offsets=True)
        consumed = int(facts.end_offsets[last][0]) * 40  # the rate source's offsets are seconds: 40 rows each
        values = spark.read.parquet(str(output)).select("value").toPandas()["value"]
        assert sorted(values) == list(range(consumed)) and consumed > 100  # nothing lost, nothing twice
    finally:
        spark.conf.unset(COMPACT_INTERVAL_CONF)


def stop_inside_the_next_batch(
    runtime: StreamRuntime, seconds_in: float, boundary_wait_s: float | None, after_write_to: Path | None = None
):
    """Stop ``seconds_in`` after a batch commits, inside the next one (they run back to back), or, with
    ``after_write_to``, ``seconds_in`` into the first Spark job after that batch's write there: the report and the
    batch it interrupted."""
    last = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    wait_until(
        lambda: checkpoint_facts(runtime.paths.checkpoint).last_committed_batch != last,
        timeout_s=60,
        what="a batch committed",
    )
    if after_write_to is not None:  # by the jobs, not the clock: under load the stop could land between two of them
        written = (
            after_write_to / f"batch={checkpoint_facts(runtime.paths.checkpoint).last_committed_batch + 1}" / "_SUCCESS"
        )
        tracker = runtime.spark.sparkContext.statusTracker()
        last_before_write = -1  # job ids grow: one above every job seen before the write is a job after it

        def job_after_the_write() -> bool:
            nonlocal last_before_write
            active = tracker.getActiveJobsIds()
            if not written.exists():
                last_before_write = max([last_before_write, *active])
                return False
            return any(job > last_before_write for job in active)

        wait_until(
            job_after_the_write, timeout_s=60, what=f"a job after the write of {written.parent}", interval_s=0.01
        )
    time.sleep(seconds_in)
    report = runtime.stop_at_batch_boundary(timeout_s=60, boundary_wait_s=boundary_wait_s)
    return report, checkpoint_facts(runtime.paths.checkpoint).last_offset_batch


@pytest.mark.parametrize(
    ("before_write", "after_write", "seconds_in", "boundary_wait_s", "in_second_job", "dropped"),
    [(1.5, 0.0, 0.3, None, False, True), (0.2, 4.0, 0.3, 0, True, False), (0.2, 4.0, 3.0, None, False, None)],
    ids=["stopped-before-the-write", "stopped-after-the-write", "waited-for-the-commit"],
)
def test_a_batch_no_sink_saw_is_planned_again_and_one_that_wrote_is_finished(
    spark, tmp_path, before_write, after_write, seconds_in, boundary_wait_s, in_second_job, dropped
):
    """Interrupted (early in a batch, or at once with ``boundary_wait_s=0``), a batch is dropped or finished by
    whether it wrote; late in a batch the stop waits for it to commit: the next, if begun, is dropped (where an
    interruption would have had to finish the written one)."""
    output = tmp_path / "out"
    spec = StreamSpec(
        name="slow",
        entrypoint="tests.user_streams.slow_batches:values",
        trigger_interval_s=0.5,
        options={"output_dir": str(output), "seconds_before_write": before_write, "seconds_after_write": after_write},
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", "slow"), spark=spark)
    runtime.start()
    wait_until(lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= 1, what="two batches")
    report, planned = stop_inside_the_next_batch(
        runtime, seconds_in, boundary_wait_s, output if in_second_job else None
    )
    facts = checkpoint_facts(runtime.paths.checkpoint)
    assert facts.committed and (report.attempts == 2 or dropped is None), report
    if dropped is None:  # stopped at the commit: before the next batch was planned, or just after (dropped)
        assert report.finished_batch is None and planned == report.last_committed_batch, report
        assert report.dropped_batch in (None, report.last_committed_batch + 1), report
    elif dropped:  # cancelled inside its only job: nothing written, its plan dropped, no re-run
        assert report.dropped_batch == report.last_committed_batch + 1 and report.finished_batch is None, report
        assert planned == report.last_committed_batch
    else:  # its write job had succeeded: finished from the offset log, as Spark would on a restart
        assert report.finished_batch == report.last_committed_batch and report.dropped_batch is None, report
    runtime.start()
    wait_until(
        lambda: (
            (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= facts.last_committed_batch + 2
        ),
        what="two batches after the restart",
    )
    runtime.stop_at_batch_boundary(timeout_s=60)
    last = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    values = (
        spark.read.parquet(*[str(output / f"batch={b}") for b in range(last + 1) if (output / f"batch={b}").exists()])
        .toPandas()["value"]
        .sort_values()
        .tolist()
    )
    assert values == list(range(len(values))) and len(values) > 20, "every value once, none lost"


@pytest.mark.parametrize(
    ("entrypoint", "match"),
    [
        (
            f"{BROKEN}:raises",
            r"stream definition tests.user_streams.broken:raises raised RuntimeError: cannot reach the "
            r"schema registry",
        ),
        (f"{BROKEN}:wrong_type", r"returned DataFrame; it must return a DataStreamWriter"),
        (f"{BROKEN}:fails_in_first_batch", r"failed in its first batch: .*bad record in the first batch"),
    ],
)
def test_bad_user_code_fails_the_start_clearly_and_leaves_no_process(supervisor, entrypoint, match):
    with pytest.raises(StreamStartError, match=match):
        supervisor.start(StreamSpec(name="bad", entrypoint=entrypoint))
    assert drivers_under(supervisor.home) == []
    assert json.loads(supervisor.paths("bad").driver.read_text())["status"] == "failed"
    if entrypoint.endswith(":raises"):  # a fixed definition starts under the same name (its first spec held no data)
        fixed = StreamSpec(
            name="bad",
            entrypoint="tests.user_streams.rates:values",
            trigger_interval_s=0.5,
            options={"output_dir": str(supervisor.home / "out")},
        )
        assert supervisor.start(fixed)["status"] == "running"


def test_bad_entrypoints_and_options_are_refused_before_any_process(supervisor):
    with pytest.raises(SpecError, match=r"no module 'my_team.jobs' on the import path"):
        supervisor.start(StreamSpec(name="ghost", entrypoint="my_team.jobs:orders"))
    with pytest.raises(SpecError, match=r"options.input_dir: Field required \(missing\)"):
        supervisor.start(StreamSpec(name="noopts", entrypoint=ORDERS))
    with pytest.raises(SpecError, match=r"source_partitions=3 is set, but stream definition .* maps no source option"):
        supervisor.start(
            StreamSpec(
                name="noknob",
                entrypoint=ORDERS,
                source_partitions=3,
                options={"input_dir": "/in", "output_dir": "/out"},
            )
        )
    assert drivers_under(supervisor.home) == [] and not supervisor.paths("ghost").driver.exists()


def test_a_dagster_run_starts_and_stops_a_user_stream_and_fails_clearly_on_bad_code(supervisor, tmp_path):
    good = StreamSpec(
        name="values",
        entrypoint="tests.user_streams.rates:values",
        trigger_interval_s=0.5,
        options={"output_dir": str(tmp_path / "out")},
    )
    bad = StreamSpec(name="broken", entrypoint=f"{BROKEN}:raises")
    control = build_stream_control_job([good, bad])
    resources = {"streams": StreamRuntimeResource(home=str(supervisor.home))}
    with instance_for_test() as instance:
        started = run(control, instance, resources, "values", "start")
        assert started.success and supervisor.driver_info("values") is not None
        assert started.output_for_node("control_stream")["status"] == "running"
        stopped = run(control, instance, resources, "values", "stop")
        assert stopped.success and supervisor.driver_info("values") is None
        failed = run(control, instance, resources, "broken", "start")
        assert not failed.success
        failure = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
        assert "cannot reach the schema registry" in failure.step_failure_data.user_failure_data.description
        unknown = run(control, instance, resources, "nope", "start")
        assert not unknown.success
    assert drivers_under(supervisor.home) == []


def run(job, instance: DagsterInstance, resources, stream: str, action: str):
    return job.execute_in_process(
        run_config={"ops": {"control_stream": {"config": {"stream": stream, "action": action}}}},
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
