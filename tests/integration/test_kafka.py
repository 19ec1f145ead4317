"""Streams over a real Kafka broker (KRaft, on 127.0.0.1) through Spark's own Kafka source: paused at a batch
boundary while the producer keeps writing, their state migrated natively and by precopy, their cores raised by
DS2's plan from the consumer lag; their output equals Spark's batch Kafka read of the whole topic. Plans that
contradict the topic, and a replay past its retention, are refused untouched. Maven Central serves no spark-sql-kafka
build for the pinned Spark 4.3.0: this runs the newest it serves (4.2.0) on the pinned Spark, and, in `.venv-compat`,
on Spark 4.2 (the pairing Spark supports)."""

import json
import subprocess
import sys
import time

import pyspark
import pytest
from dagster import build_sensor_context, instance_for_test

from dagster_reconf import AuditLedgerResource, StreamRuntimeResource, build_scaling_assets, build_scaling_sensor
from dagster_reconf.cli import main as reconf
from dagster_reconf.core.errors import StreamStartError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.scaling.scaling_plan import ScalingPlan
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore, record_row
from dagster_reconf.harness.oracle import check_with_oracle
from dagster_reconf.workloads.kafka import KafkaBroker, KafkaSetupError, spark_kafka_jars
from dagster_reconf.workloads.nexmark_topic import NexmarkTopicWriter, check_topic_output
from examples.kafka_clicks.streams import ClickProducer

from .conftest import wait_until

pytestmark = pytest.mark.spark

TOPIC = "clicks"


@pytest.fixture(name="broker", scope="module")
def broker_fixture(tmp_path_factory):
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker
    assert broker.pid is None


def committed(supervisor, name) -> int:
    return checkpoint_facts(supervisor.paths(name).checkpoint).last_committed_batch or -1


def test_a_kafka_stream_is_migrated_natively_and_by_precopy_while_the_producer_writes(supervisor, broker, tmp_path):
    broker.create_topic(TOPIC, partitions=4)
    producer = ClickProducer(broker.bootstrap_servers, TOPIC)
    producer.write(2000)
    spec = StreamSpec(
        name="clicks",
        entrypoint="examples.kafka_clicks.streams:first_clicks",
        state_partitions=4,
        trigger_interval_s=0.5,
        max_per_trigger=600,
        spark_conf={"spark.jars": spark_kafka_jars()},
        options={"bootstrap_servers": broker.bootstrap_servers, "topic": TOPIC, "output_dir": str(tmp_path / "out")},
    )
    supervisor.start(spec)
    stream = DriverStream(supervisor, "clicks")
    reconfigurer = Reconfigurer(stream, AuditLedger(default_ledger_url(supervisor.home)), observe_timeout_s=20)
    with producer.keep_writing(per_second=400):
        wait_until(lambda: committed(supervisor, "clicks") >= 2, what="two batches")
        status = supervisor.status("clicks")
        assert status["source_kinds"] == "kafka" and status["backlog_events"] is not None  # the consumer lag
        pairing = status["kafka_connector"]  # read from the connector's jar in the driver's JVM
        assert pairing["connector"] == "4.2.0" and pairing["spark"] == pyspark.__version__
        assert (pairing["warning"] is None) == pyspark.__version__.startswith("4.2."), pairing

        plan = ExecutionPlan.of(stream.spec()).model_dump()
        plan["partitioning"]["state_partitions"] = 8
        result = reconfigurer.run(plan, trigger={"user": "test"})
        assert result.outcome == "succeeded", result.results
        assert result.results["preflight"]["checks"]["capabilities"]["pause"]
        verification = result.verification
        assert verification.ok, verification
        (store,) = verification.stores  # dropDuplicates: one state store, every user kept
        assert store["rows_before"] == store["rows_after"] > 1000 and store["max_partition_id"] == 7
        assert checkpoint_facts(stream.paths.checkpoint).state_partitions == 8
        # The precopy: the state copied while the stream runs, the batches since replayed from the topic's offsets.
        precopy = Reconfigurer(
            stream, AuditLedger(default_ledger_url(supervisor.home)), strategy="precopy", observe_timeout_s=20
        ).run(ExecutionPlan.of_changes(stream.spec(), {"state_partitions": 6}))
        assert precopy.outcome == "succeeded" and precopy.verification.ok, precopy.results
        assert checkpoint_facts(stream.paths.checkpoint).state_partitions == 6
        resumed_at = committed(supervisor, "clicks")
        wait_until(lambda: committed(supervisor, "clicks") > resumed_at + 2, what="batches after the migration")
    # The producer has stopped: let the stream read the whole topic, then stop it at a batch boundary.
    wait_until(
        lambda: (
            supervisor.status("clicks").get("backlog_events") == 0
            and supervisor.status("clicks")["checkpoint"]["committed"]
        ),
        timeout_s=180,
        what="the whole topic read",
    )
    end = checkpoint_facts(stream.paths.checkpoint, with_offsets=True)
    assert sum(end.end_offsets[end.last_committed_batch][0][TOPIC].values()) == producer.sent  # every record read
    stopped = supervisor.stop("clicks")
    assert stopped["stopped"] and "forced" not in stopped

    comparison = run_oracle(supervisor.home, "clicks")
    assert comparison["lost"] == 0 and comparison["duplicated"] == 0, comparison
    assert comparison["expected_rows"] == comparison["actual_rows"] > producer.sent / 3  # half the clicks are new users


def run_oracle(home, stream: str) -> dict:
    """The batch job over the whole topic, in a session that has the connector (this process's JVM does not)."""
    check = subprocess.run(
        [sys.executable, "-m", "examples.kafka_clicks.streams", "check", "--home", str(home), "--stream", stream],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    return json.loads(check.stdout.strip().splitlines()[-1])


def test_consumer_lag_drives_a_ds2_scale_up_within_the_topic_s_partitions(supervisor, broker, tmp_path, capsys):
    """One core does 100 clicks/s (10 ms each) and the producer writes 160/s to a topic of 4 partitions: the lag
    grows, the scaling sensor asks for DS2's plan (more cores, no fewer source tasks than partitions), and after it
    the stream catches up with its output equal to the batch read. A plan that contradicts the topic, and a replay
    whose first offsets retention has dropped, are refused before anything is touched."""
    topic = "lagging"
    broker.create_topic(topic, partitions=4)
    producer = ClickProducer(broker.bootstrap_servers, topic, seed=11)
    producer.write(300)
    spec = StreamSpec(
        name="lagging",
        entrypoint="examples.kafka_clicks.streams:first_clicks",
        master="local[1]",
        state_partitions=4,
        trigger_interval_s=1.0,
        max_per_trigger=200,
        spark_conf={"spark.jars": spark_kafka_jars()},
        kafka={"bootstrap_servers": broker.bootstrap_servers},
        options={
            "bootstrap_servers": broker.bootstrap_servers,
            "topic": topic,
            "output_dir": str(tmp_path / "out"),
            "work_ms_per_click": 10,
        },
    )
    policy = {"window_batches": 4, "warmup_batches": 1, "stabilization_s": 0, "scale_down_delay_s": 3600}
    scaling = build_scaling_assets(streams=["lagging"], policy_config=policy)
    sensor = build_scaling_sensor(stream="lagging", scaling=scaling, minimum_interval_seconds=1)
    resources = {
        "streams": StreamRuntimeResource(home=str(supervisor.home)),
        "audit_ledger": AuditLedgerResource(home=str(supervisor.home)),
    }
    supervisor.start(spec)
    stream = DriverStream(supervisor, "lagging")
    reconfigurer = Reconfigurer(stream, AuditLedger(default_ledger_url(supervisor.home)), observe_timeout_s=30)
    with instance_for_test() as instance, producer.keep_writing(per_second=160):
        wait_until(lambda: committed(supervisor, "lagging") >= 6, timeout_s=180, what="six batches")
        lag = stream.kafka_lag()
        assert lag is not None and lag.partition_counts() == {topic: 4} and lag.total > 0, lag
        assert reconf(["--home", str(supervisor.home), "stream", "status", "lagging", "--lag", "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)["kafka_lag"]
        assert [p["partition"] for p in shown["partitions"]] == [0, 1, 2, 3] and shown["total"] > 0

        result = sensor(build_sensor_context(instance=instance, resources=resources))
        assert result.run_requests, result.skip_reason
        (request,) = result.run_requests
        plan = ScalingPlan.parse(request.run_config["ops"]["ds2_plans"]["config"]["plan"])
        assert plan.current.cores == 1 and plan.target.cores >= 2, plan.reason
        assert plan.predicted["observed_source_partitions_seen"] == 4
        assert plan.target.source_partitions is None  # the spec set no minPartitions: the plan invents none

        applied = reconfigurer.run(ExecutionPlan.of_changes(stream.spec(), plan.target.changes_for(stream.spec())))
        assert applied.outcome == "succeeded", applied.results
        checks = applied.results["preflight"]["checks"]
        assert checks["kafka"]["partitions"] == {topic: 4} and checks["kafka"]["read_from"] == "the brokers"

        contradicting = ExecutionPlan.of_changes(stream.spec(), {"source_partitions": 2})
        with pytest.raises(ReconfigurationRefused, match=r"2 source partitions, but .* have 4 partitions"):
            reconfigurer.run(contradicting)
    wait_until(lambda: stream.kafka_lag().total == 0, timeout_s=240, what="the lag cleared after the scale-up")
    wait_until(lambda: supervisor.status("lagging")["checkpoint"]["committed"], what="the last batch committed")
    comparison = run_oracle(supervisor.home, "lagging")
    assert comparison["lost"] == 0 and comparison["duplicated"] == 0, comparison

    # The topic gains two partitions while the stream runs: the brokers show them at once (not read yet), the next
    # batch's progress plans from them, and preflight refuses a plan made for the old count.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient(broker.client_config())
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(timeout=30)
    wait_until(lambda: stream.kafka_lag().partition_counts() == {topic: 6}, what="the new partitions on the brokers")
    wait_until(
        lambda: (
            MetricsStore(stream.paths.metrics).last_progress() is not None
            and record_row(MetricsStore(stream.paths.metrics).last_progress())["kafka_partitions"] == 6
        ),
        timeout_s=60,
        what="a batch planned from 6 partitions",
    )
    with pytest.raises(ReconfigurationRefused, match=r"5 source partitions, but .* have 6 partitions"):
        reconfigurer.run(ExecutionPlan.of_changes(stream.spec(), {"source_partitions": 5}))

    # Retention drops the first 50 records of partition 0: a replay from batch 0 would rebuild the state without them.
    for future in admin.delete_records([TopicPartition(topic, 0, 50)], request_timeout=30).values():
        future.result(timeout=30)
    replay = ExecutionPlan.of_changes(stream.spec(), {"state_partitions": 8})
    run_id = supervisor.status("lagging")["run_id"]
    with pytest.raises(ReconfigurationRefused, match=rf"{topic}/0 from 0 \(earliest kept: 50\).*strategy 'native'"):
        Reconfigurer(stream, AuditLedger(default_ledger_url(supervisor.home)), strategy="replay").run(replay)
    assert supervisor.status("lagging")["run_id"] == run_id  # refused before anything was touched
    assert checkpoint_facts(stream.paths.checkpoint).state_partitions == 4
    supervisor.stop("lagging")


@pytest.mark.parametrize(("query", "change"), [("q5", {"state_partitions": 4}), ("q3", {"master": "local[3]"})])
def test_nexmark_over_a_topic_is_reconfigured_and_equals_the_batch_job_over_the_topic(
    supervisor, broker, tmp_path, query, change
):
    """Q5 (windowed counts) and Q3 (a join) over a 4-partition Nexmark topic, keyed by auction or person: one native
    migration or cores change while the writer writes; the oracle reads the topic between the checkpoint's first and
    last committed offsets and runs the query as a batch job over exactly those records."""
    topic = f"nexmark-{query}"
    broker.create_topic(topic, partitions=4)
    writer = NexmarkTopicWriter(broker.bootstrap_servers, topic)
    writer.write(2000)
    spec = StreamSpec(
        name=query,
        entrypoint=f"dagster_reconf.workloads.nexmark_topic:{query}",
        state_partitions=2,
        trigger_interval_s=1.0,
        max_per_trigger=1500,
        spark_conf={"spark.jars": spark_kafka_jars()},
        kafka={"bootstrap_servers": broker.bootstrap_servers},
        options={"bootstrap_servers": broker.bootstrap_servers, "topic": topic},
    )
    supervisor.start(spec)
    stream = DriverStream(supervisor, query)
    with writer.keep_writing(per_second=500):
        wait_until(lambda: committed(supervisor, query) >= 3, what="three batches")
        result = Reconfigurer(stream, AuditLedger(default_ledger_url(supervisor.home)), observe_timeout_s=20).run(
            ExecutionPlan.of_changes(stream.spec(), change)
        )
        assert result.outcome == "succeeded" and result.verification.ok, result.results
        resumed_at = committed(supervisor, query)
        wait_until(lambda: committed(supervisor, query) > resumed_at + 1, what="batches after the change")
    wait_until(lambda: stream.kafka_lag().total == 0, timeout_s=120, what="the topic read to its end")
    wait_until(lambda: supervisor.status(query)["checkpoint"]["committed"], what="the last batch committed")
    supervisor.stop(query)
    assert check_with_oracle(check_topic_output, supervisor.home, stream.spec()).ok


def test_a_stream_into_a_kafka_sink_is_labelled_at_least_once_and_replays_within_retention(
    supervisor, broker, tmp_path
):
    """A topic-to-topic relay (Spark's Kafka sink): at-least-once in status and at preflight, with what a stop in the
    middle of a batch may repeat; its state rebuilt by the replay strategy from the checkpoint's offsets (retention
    keeps them all), verified, and every user in the sink topic."""
    broker.create_topic("relay-in", partitions=2)
    broker.create_topic("relay-out", partitions=2)
    producer = ClickProducer(broker.bootstrap_servers, "relay-in", seed=5)
    producer.write(600)
    spec = StreamSpec(
        name="relay",
        entrypoint="tests.user_streams.kafka_relay:first_clicks_relay",
        state_partitions=2,
        trigger_interval_s=0.5,
        max_per_trigger=200,
        spark_conf={"spark.jars": spark_kafka_jars()},
        kafka={"bootstrap_servers": broker.bootstrap_servers},
        options={"bootstrap_servers": broker.bootstrap_servers, "source_topic": "relay-in", "sink_topic": "relay-out"},
    )
    supervisor.start(spec)
    stream = DriverStream(supervisor, "relay")
    wait_until(lambda: stream.kafka_lag() is not None and stream.kafka_lag().total == 0, what="the topic read")
    delivery = supervisor.status("relay")["delivery"]
    assert delivery["sink"] == "kafka" and delivery["guarantee"] == "at-least-once", delivery
    replay = Reconfigurer(stream, AuditLedger(default_ledger_url(supervisor.home)), strategy="replay").run(
        ExecutionPlan.of_changes(stream.spec(), {"state_partitions": 3})
    )
    assert replay.outcome == "succeeded" and replay.verification.ok, replay.results
    warnings = replay.results["preflight"]["checks"]["warnings"]
    assert any("at-least-once" in w and "may repeat up to" in w for w in warnings), warnings
    assert any("may repeat up to" in line for line in replay.explanation())
    producer.write(100)
    wait_until(lambda: stream.kafka_lag().total == 0, what="the new clicks read after the replay")
    supervisor.stop("relay")
    relayed = {key for key, _ in _read_all(broker, "relay-out")}
    users = {key for key, _ in _read_all(broker, "relay-in")}
    assert relayed == users  # at least once: none lost (a repeat would be allowed, and said)


def _read_all(broker, topic: str) -> list[tuple[bytes, bytes]]:
    """Every record of ``topic``, from its start to its end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    ends = broker.end_offsets(topic)
    consumer = Consumer(broker.client_config(**{"group.id": f"check-{topic}", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    found: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < sum(ends.values()) and time.monotonic() < deadline:
            found += [(m.key(), m.value()) for m in consumer.consume(1000, timeout=1.0) if m.error() is None]
    finally:
        consumer.close()
    return found


def test_a_stream_without_the_connector_is_refused_with_the_fix(supervisor, broker, tmp_path):
    spec = StreamSpec(
        name="noconnector",
        entrypoint="examples.kafka_clicks.streams:first_clicks",
        options={"bootstrap_servers": broker.bootstrap_servers, "topic": TOPIC, "output_dir": str(tmp_path / "out")},
    )
    with pytest.raises(
        StreamStartError,
        match=r"Failed to find data source: kafka.*; put Spark's Kafka connector on "
        r"the driver's classpath .*spark-sql-kafka-0-10_2.13",
    ):
        supervisor.start(spec)


def test_the_connector_jars_missing_is_said_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("RECONF_JVM_DIR", str(tmp_path))
    with pytest.raises(KafkaSetupError, match=r"no spark-sql-kafka jars in .*: run `make kafka`"):
        spark_kafka_jars()
    with pytest.raises(KafkaSetupError, match=r"no Kafka broker jars in .*: run `make kafka`"):
        KafkaBroker(tmp_path / "broker").start()
