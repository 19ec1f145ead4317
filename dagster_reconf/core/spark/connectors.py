"""Which build of Spark's Kafka connector a driver runs, against the Spark it runs on.

PySpark does not ship the Kafka connector; a stream loads it from ``spark.jars`` or ``spark.jars.packages``, and
Maven Central may serve no build for the installed Spark (none for 4.3.0: the newest served is 4.2.0, which ``make
kafka`` resolves). A connector of another minor version than Spark's is a pairing Spark does not promise: it is
recorded in the stream's status and warned about at preflight, read from the connector's own jar manifest in the
running JVM (``Implementation-Version``), so it holds for whatever the user put on the classpath.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ConnectorPairing", "kafka_connector"]

KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


@dataclass(frozen=True)
class ConnectorPairing:
    """The Kafka connector's version (None: not on the classpath) and Spark's; ``warning`` where they differ in
    their minor version."""

    connector: str | None
    spark: str

    @property
    def warning(self) -> str | None:
        if (
            self.connector is None
            or _minor(self.connector) == _minor(self.spark)
            or self.connector.startswith("unknown")
        ):
            return None
        return (
            f"Spark's Kafka connector {self.connector} runs on Spark {self.spark}: their minor versions differ, a "
            "pairing Spark does not promise (Maven Central serves no connector build for every Spark). Use "
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{self.spark} in spark.jars.packages once it is served"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "warning": self.warning}


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def kafka_connector(spark: SparkSession) -> ConnectorPairing:
    """The pairing in ``spark``'s JVM (the connector is looked up by its provider class, not by jar name)."""
    jvm = spark.sparkContext._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()  # where spark.jars are loaded
    try:
        package = jvm.java.lang.Class.forName(KAFKA_PROVIDER, False, loader).getPackage()
    except Exception:  # noqa: BLE001 - py4j's error for a class not found: no connector on the classpath
        return ConnectorPairing(None, spark.version)
    version = package.getImplementationVersion() if package is not None else None
    return ConnectorPairing(str(version) if version else "unknown (its jar names no version)", spark.version)
