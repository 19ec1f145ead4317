"""Kafka as the control plane sees it: the topics a stream reads, against what its checkpoint has committed.

- ``access``: how the control plane reaches a stream's brokers (a spec field; its own client settings).
- ``topics``: each partition's earliest and latest offsets, read from the brokers.
- ``positions``: the Kafka offsets a checkpoint logged (committed, and where a replay starts).
- ``lag``: consumer lag per partition, and what a plan or a replay must not contradict (partitions, retention).
"""

from dagster_reconf.core.kafka.access import KafkaAccess
from dagster_reconf.core.kafka.lag import (
    ConsumerLag,
    PartitionLag,
    consumer_lag,
    partition_problems,
    retention_problems,
)
from dagster_reconf.core.kafka.positions import committed_positions, replay_start_positions, topic_partitions
from dagster_reconf.core.kafka.topics import PartitionOffsets, TopicFacts, read_topics

__all__ = [
    "ConsumerLag",
    "KafkaAccess",
    "PartitionLag",
    "PartitionOffsets",
    "TopicFacts",
    "committed_positions",
    "consumer_lag",
    "partition_problems",
    "read_topics",
    "replay_start_positions",
    "retention_problems",
    "topic_partitions",
]
