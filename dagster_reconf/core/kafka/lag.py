"""Consumer lag per partition, and what a plan or a replay must not contradict on a topic.

Spark commits no consumer group offsets: a stream's committed position is its checkpoint's last committed batch. Lag
is each partition's latest offset on the broker minus that position; a partition the checkpoint has not read yet (a
topic that gained partitions) lags by everything retention keeps of it, which Spark will read from its earliest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from dagster_reconf.core.kafka.access import KafkaAccess
from dagster_reconf.core.kafka.positions import Positions, committed_positions, kafka_source_indexes
from dagster_reconf.core.kafka.topics import TopicFacts, read_topics
from dagster_reconf.core.store.storage import Location

__all__ = [
    "ConsumerLag",
    "PartitionLag",
    "consumer_lag",
    "partition_problems",
    "retention_problems",
    "stream_consumer_lag",
]


@dataclass(frozen=True)
class PartitionLag:
    """One partition: the checkpoint's position (None: not read yet), the broker's offsets, and the lag between."""

    topic: str
    partition: int
    committed: int | None
    earliest: int
    latest: int

    @property
    def lag(self) -> int:
        start = self.earliest if self.committed is None else max(self.committed, self.earliest)
        return max(0, self.latest - start)


@dataclass(frozen=True)
class ConsumerLag:
    """A stream's lag behind its topics, partition by partition."""

    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def unread_partitions(self) -> list[str]:
        """Partitions the topic has that the checkpoint never read (it gained them while the stream ran)."""
        return [f"{p.topic}/{p.partition}" for p in self.partitions if p.committed is None]

    def partition_counts(self) -> dict[str, int]:
        return dict(Counter(p.topic for p in self.partitions))

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "partitions": [{**asdict(p), "lag": p.lag} for p in self.partitions],
            "unread_partitions": self.unread_partitions,
        }


def consumer_lag(committed: Positions, facts: dict[str, TopicFacts]) -> ConsumerLag:
    """Lag of ``committed`` behind the brokers' latest offsets, for every partition of ``facts``' topics."""
    return ConsumerLag(
        [
            PartitionLag(topic, p, committed.get(topic, {}).get(p), offsets.earliest, offsets.latest)
            for topic, found in sorted(facts.items())
            for p, offsets in sorted(found.partitions.items())
        ]
    )


def stream_consumer_lag(
    checkpoint: Location, progress: dict[str, Any] | None, access: KafkaAccess
) -> ConsumerLag | None:
    """The lag of a stream's Kafka sources from its checkpoint and the brokers (None: it reads no Kafka or has
    committed no batch yet)."""
    indexes = kafka_source_indexes(progress)
    committed = committed_positions(checkpoint, indexes) if indexes else None
    if not committed:
        return None
    return consumer_lag(committed, read_topics(access, sorted(committed)))


def partition_problems(source_partitions: int | None, partitions: dict[str, int]) -> list[str]:
    """Why a plan's source partitions (mapped onto Kafka's ``minPartitions``) contradict the topics: Spark reads each
    topic partition in one task at least, so fewer source partitions than topic partitions cannot happen."""
    total = sum(partitions.values())
    if source_partitions is None or not total or source_partitions >= total:
        return []
    topics = ", ".join(f"{t} ({n})" for t, n in sorted(partitions.items()))
    return [
        f"the plan gives {source_partitions} source partitions, but the stream's Kafka topics have {total} "
        f"partitions ({topics}) and Spark reads each in a task of its own: plan at least {total} source partitions "
        "(more split the offsets through minPartitions), or add no source-partitions knob"
    ]


def retention_problems(needed: Positions, facts: dict[str, TopicFacts], what: str) -> list[str]:
    """Where the brokers no longer keep offsets that ``what`` (a replay) must read from ``needed``."""
    dropped = [
        f"{topic}/{p} from {offset} (earliest kept: {facts[topic].partitions[p].earliest})"
        for topic, partitions in sorted(needed.items())
        if topic in facts
        for p, offset in sorted(partitions.items())
        if p in facts[topic].partitions and offset < facts[topic].partitions[p].earliest
    ]
    if not dropped:
        return []
    shown = "; ".join(dropped[:4]) + (f"; and {len(dropped) - 4} more" if len(dropped) > 4 else "")
    return [
        f"{what} must read {shown}, but the topic's retention has already dropped those records: it would rebuild "
        "the state from part of its input. Use strategy 'native' (it moves the state as it is)"
    ]
