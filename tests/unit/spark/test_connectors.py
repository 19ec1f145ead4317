"""The Kafka connector's build against Spark's: a warning only where their minor versions differ."""

from dagster_reconf.core.spark.connectors import ConnectorPairing


def test_a_connector_of_another_minor_version_is_warned_about_with_the_fix():
    warning = ConnectorPairing("4.2.0", "4.3.0").warning
    assert warning is not None and "4.2.0 runs on Spark 4.3.0" in warning
    assert "spark-sql-kafka-0-10_2.13:4.3.0" in warning


def test_a_matching_or_missing_connector_is_not():
    assert ConnectorPairing("4.2.1", "4.2.0").warning is None
    assert ConnectorPairing(None, "4.3.0").warning is None
    assert ConnectorPairing("unknown (its jar names no version)", "4.3.0").warning is None
    assert ConnectorPairing("4.2.0", "4.3.0").as_dict()["warning"]
