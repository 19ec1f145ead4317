"""A real single-node Apache Kafka broker (KRaft) on 127.0.0.1, and Spark's Kafka connector jars.

Why: a stream over Kafka is only proven against a real broker, and Spark reads Kafka only
through its own connector, which pyspark does not ship. ``make kafka`` resolves both from
Maven Central with ``mvn`` into ``.jvm/`` (``jvm/*.pom.xml`` pin the versions); this module
finds them, formats a broker directory, starts the broker in its own session, and stops it
again with nothing left behind. The tests and the examples share it; on a cluster of your own,
name the connector's coordinates in ``spark.jars.packages`` instead (see the README).

Admin and producing go through confluent-kafka (librdkafka), which is also what a user's
producer is likely to be.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from dagster_reconf.workloads.jvm import JarsMissing, jvm_dir, resolved_jars

__all__ = ["KafkaBroker", "KafkaSetupError", "TopicWriter", "jvm_dir", "spark_kafka_jars"]

LOOPBACK = "127.0.0.1"


class KafkaSetupError(RuntimeError):
    """The broker or the connector is not installed, or the broker did not start."""


def _jars(folder: str, what: str) -> list[Path]:
    try:
        return resolved_jars(folder, what, "kafka")
    except JarsMissing as missing:
        raise KafkaSetupError(str(missing)) from None


def spark_kafka_jars() -> str:
    """Spark's Kafka connector and its dependencies, comma-separated for ``spark.jars``."""
    return ",".join(str(jar) for jar in _jars("spark-sql-kafka", "spark-sql-kafka"))


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on loopback: all bound at once, so the OS cannot hand out one twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


_LOG4J2 = """\
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


class KafkaBroker:
    """One broker that is also its own KRaft controller, listening on loopback only.

    ``with KafkaBroker(directory) as broker:`` formats ``directory`` (once), starts the broker
    on free ports and waits until it answers; leaving the block stops it (SIGTERM, then
    SIGKILL to the whole process group). ``broker.bootstrap_servers`` is what clients name.
    """

    def __init__(self, directory: Path | str, port: int | None = None, heap_mb: int = 512) -> None:
        self.directory = Path(directory).resolve()
        ports = [p for p in _free_ports(2) if p != port]
        self.port, self.controller_port = port or ports[0], ports[-1]
        self.heap_mb = heap_mb
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    def _java(self, main: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in _jars("kafka-broker", "Kafka broker"))
        return [
            "java",
            f"-Xmx{self.heap_mb}m",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_file))
        config = self.directory / "server.properties"
        config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@{LOOPBACK}:{self.controller_port}",
                    f"listeners=PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://{LOOPBACK}:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={self.directory / 'data'}",
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                ]
            )
            + "\n"
        )
        return config

    def start(self, timeout_s: float = 90.0) -> Self:
        """Format the log directory (a fresh cluster id the first time) and start the broker."""
        if self._process is not None and self._process.poll() is None:
            return self
        config = self._write_config()
        if not (self.directory / "data" / "meta.properties").exists():
            formatted = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config)),
                check=False,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if formatted.returncode != 0:
                raise KafkaSetupError(f"formatting {self.directory / 'data'} failed: {formatted.stderr.strip()[-800:]}")
        with open(self.directory / "broker.out", "ab") as out:
            self._process = subprocess.Popen(
                self._java("kafka.Kafka", str(config)), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise KafkaSetupError(
                    f"the Kafka broker exited with {self._process.returncode} while starting; "
                    f"see {self.directory / 'broker.out'} and {self.log_file}"
                )
            if self._answers():
                return self
            time.sleep(0.5)
        self.stop()
        raise KafkaSetupError(
            f"the Kafka broker did not answer on {self.bootstrap_servers} in {timeout_s:.0f} s; see {self.log_file}"
        )

    def _answers(self) -> bool:
        """The listener accepts connections and the broker serves metadata (checked in that order, so that
        librdkafka never logs refused connections while the JVM starts)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            socket.create_connection((LOOPBACK, self.port), timeout=1).close()
        except OSError:
            return False
        admin = AdminClient(self.client_config())
        try:
            return bool(admin.list_topics(timeout=5).brokers)
        except KafkaException:
            return False

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the broker: SIGTERM (a clean shutdown), then SIGKILL to its process group."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- clients (confluent-kafka) -------------------------------------------------------------

    def client_config(self, **extra: object) -> dict[str, object]:
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    def create_topic(self, name: str, partitions: int, timeout_s: float = 30.0) -> None:
        """Create ``name`` with ``partitions`` partitions (replication 1) and wait until it exists."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.client_config())  # kept alive until the result is in: its futures die with it
        admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout_s)[name].result(
            timeout=timeout_s
        )

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's next offset (its high watermark): what a consumer that read everything has read."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.client_config(**{"group.id": "dagster-reconf-offsets", "enable.auto.commit": False}))
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in sorted(partitions)
            }
        finally:
            consumer.close()


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting with "-" (as Kafka's
    ``random-uuid`` does: the storage tool would read such an id as an option)."""
    import base64

    while (found := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return found


class TopicWriter(ABC):
    """A producer of records to one topic with confluent-kafka (idempotent, so a retry never doubles a record), paced
    by :meth:`keep_writing`; a subclass says what the ``count`` next records are (:meth:`records`)."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.sent = 0
        self._producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": True})

    @abstractmethod
    def records(self, start: int, count: int) -> Iterator[tuple[bytes, bytes]]:
        """Records ``start .. start + count`` as (key, value)."""

    def write(self, count: int) -> None:
        """Write the next ``count`` records and wait until the broker has them."""
        for key, value in self.records(self.sent, count):
            self._producer.produce(self.topic, key=key, value=value)
            self._producer.poll(0)
        self.sent += count
        if self._producer.flush(30) != 0:
            raise KafkaSetupError(f"{self.topic}: records still unsent after 30 s")

    @contextmanager
    def keep_writing(
        self, per_second: float, every_s: float = 0.25, start_when: Callable[[], bool] | None = None
    ) -> Iterator[Self]:
        """Write ``per_second`` records a second in the background while the block runs (from when ``start_when``
        first holds, checked every ``every_s``, where given: a reader's start-up is then no backlog)."""
        stop = threading.Event()

        def run() -> None:
            while start_when is not None and not start_when() and not stop.wait(every_s):
                pass
            started, due = time.monotonic(), 0
            while not stop.wait(every_s):
                target = int((time.monotonic() - started) * per_second)
                self.write(target - due)
                due = target

        thread = threading.Thread(target=run, name=f"{self.topic}-writer", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
