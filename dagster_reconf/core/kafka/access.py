"""How the control plane reaches a stream's Kafka brokers: the spec's ``kafka`` field.

Spark's Kafka source keeps its connection settings inside the driver's query plan, out of reach of a
process that only reads checkpoints and metrics. A spec that names the brokers lets the control plane
read each partition's offsets itself: the consumer lag of a paused or dead stream, the topic's
partition count before a plan is applied, and whether retention still holds what a replay must read.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["KafkaAccess"]

_SERVER = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
_OWNED = {"bootstrap.servers", "group.id", "enable.auto.commit"}


class KafkaAccess(BaseModel):
    """The brokers of the topics a stream reads, and the client settings the control plane needs for them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str = Field(..., description="host:port[,host:port]: the brokers the stream's source names.")
    client_config: dict[str, str] = Field(
        default_factory=dict,
        description="librdkafka settings for the control plane's read-only client (security.protocol, sasl.*, "
        "ssl.*); it only lists topics and reads watermark offsets, and commits nothing.",
    )
    timeout_s: float = Field(10.0, gt=0, le=120, description="How long one read of the brokers may take.")

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, value: str) -> str:
        bad = [s for s in value.split(",") if not _SERVER.match(s.strip())]
        if bad:
            raise ValueError(f"bootstrap server {bad[0]!r} is not host:port; e.g. 'broker1:9092,broker2:9092'")
        return value

    @field_validator("client_config")
    @classmethod
    def _not_owned(cls, value: dict[str, str]) -> dict[str, str]:
        owned = sorted(_OWNED & set(value))
        if owned:
            raise ValueError(
                f"client_config sets {owned}, which the control plane sets itself (bootstrap_servers is its own "
                "field; its client commits nothing): remove them"
            )
        return value

    def client_settings(self) -> dict[str, object]:
        """Settings for a confluent-kafka client that reads offsets and commits none."""
        return {
            **self.client_config,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": "dagster-reconf-control-plane",
            "enable.auto.commit": False,
        }
