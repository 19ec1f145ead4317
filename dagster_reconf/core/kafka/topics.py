"""Each partition's earliest and latest offsets, read from the brokers with confluent-kafka.

The latest offset (high watermark) is where a consumer that read everything stands; the earliest (low
watermark) is what retention still keeps: a replay that must start below it has lost data.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagster_reconf.core.errors import SourceAccessError
from dagster_reconf.core.kafka.access import KafkaAccess

__all__ = ["PartitionOffsets", "TopicFacts", "read_topics"]


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's offsets on the broker: ``earliest`` kept by retention, ``latest`` the next to be written."""

    earliest: int
    latest: int


@dataclass(frozen=True)
class TopicFacts:
    """A topic's partitions and their offsets, as the brokers answered."""

    topic: str
    partitions: dict[int, PartitionOffsets]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


def read_topics(access: KafkaAccess, topics: list[str]) -> dict[str, TopicFacts]:
    """The facts of each of ``topics``.

    Raises:
        SourceAccessError: confluent-kafka is missing, the brokers do not answer within ``access.timeout_s``,
            or a topic does not exist; the message names the brokers, the topic and the fix.
    """
    try:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
    except ImportError as error:
        raise SourceAccessError(
            "reading Kafka offsets needs confluent-kafka: pip install 'dagster-reconf[kafka]'"
        ) from error
    try:
        consumer = Consumer(access.client_settings())
    except KafkaException as error:
        raise SourceAccessError(
            f"the spec's kafka.client_config is not a valid librdkafka configuration ({error}); see "
            "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
        ) from error
    try:
        try:
            listing = consumer.list_topics(timeout=access.timeout_s)
        except KafkaException as error:
            raise SourceAccessError(
                f"Kafka brokers {access.bootstrap_servers} did not answer in {access.timeout_s:.0f} s ({error}); "
                "check the spec's kafka.bootstrap_servers and client_config"
            ) from error
        facts = {}
        for topic in topics:
            found = listing.topics.get(topic)
            if found is None or found.error is not None:
                raise SourceAccessError(
                    f"topic {topic!r} is not on Kafka brokers {access.bootstrap_servers}"
                    + (f" ({found.error})" if found is not None else "")
                    + "; the stream's checkpoint reads it: check the spec's kafka.bootstrap_servers"
                )
            partitions = {}
            for partition in sorted(found.partitions):
                try:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=access.timeout_s
                    )
                except KafkaException as error:
                    raise SourceAccessError(
                        f"Kafka brokers {access.bootstrap_servers} gave no offsets of {topic}/{partition}: {error}"
                    ) from error
                partitions[partition] = PartitionOffsets(int(low), int(high))
            facts[topic] = TopicFacts(topic, partitions)
        return facts
    finally:
        consumer.close()
