"""A stream over a real Kafka broker (KRaft, on 127.0.0.1) through Spark's own Kafka source: paused at a batch
boundary while the producer keeps writing, its state migrated 4 -> 8 partitions, resumed; its output equals
Spark's batch Kafka read of the whole topic. Maven Central serves no spark-sql-kafka build for the pinned
Spark 4.3.0: this runs the newest it serves (4.2.0) on the pinned Spark, and is the record of whether that works."""

import json
import subprocess
import sys

import pyspark
import pytest

from dagster_reconf.core.errors import StreamStartError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, Reconfigurer
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.workloads.kafka import KafkaBroker, KafkaSetupError, spark_kafka_jars
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


def test_a_kafka_stream_is_paused_migrated_and_resumed_while_the_producer_writes(supervisor, broker, tmp_path):
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

    # The batch job over the whole topic, in a session that has the connector (this process's JVM does not).
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.kafka_clicks.streams",
            "check",
            "--home",
            str(supervisor.home),
            "--stream",
            "clicks",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    comparison = json.loads(check.stdout.strip().splitlines()[-1])
    assert comparison["lost"] == 0 and comparison["duplicated"] == 0, comparison
    assert comparison["expected_rows"] == comparison["actual_rows"] > producer.sent / 3  # half the clicks are new users


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
