"""Preflight for streams over Kafka: the plan against the topics, a replay against their retention, and what an
at-least-once Kafka sink may repeat.

The partition count comes from the brokers where the spec's ``kafka`` names them (so a topic that gained partitions
since the last batch is planned for), else from the last batch's ``latestOffset``. A replay rebuilds the state from
batch 0, so it needs every record from the source's initial offsets on; a precopy needs those since its copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_reconf.core.errors import SourceAccessError
from dagster_reconf.core.kafka.lag import consumer_lag, partition_problems, retention_problems
from dagster_reconf.core.kafka.positions import (
    committed_positions,
    kafka_source_indexes,
    replay_start_positions,
    topic_partitions,
)
from dagster_reconf.core.kafka.topics import read_topics

if TYPE_CHECKING:
    from dagster_reconf.core.reconfig.handles import StreamHandle
    from dagster_reconf.core.reconfig.reconfiguration import Reconfiguration

__all__ = ["MIN_PARTITIONS_OPTION", "kafka_problems", "repeat_bound"]

MIN_PARTITIONS_OPTION = "minPartitions"


def kafka_problems(
    r: Reconfiguration, stream: StreamHandle, progress: dict[str, Any] | None, checks: dict[str, Any]
) -> list[str]:
    """What forbids ``r`` on a stream that reads Kafka (``checks["kafka"]`` gains what was read); none for others."""
    indexes = kafka_source_indexes(progress)
    if not indexes:
        return []
    spec = stream.spec()
    checkpoint = stream.paths.checkpoint
    committed = committed_positions(checkpoint, indexes) or {}
    partitions = topic_partitions(progress)
    found: dict[str, Any] = {"partitions": partitions, "read_from": "the last batch's latestOffset"}
    checks["kafka"] = found
    problems: list[str] = []
    facts = None
    if spec.kafka is not None:
        try:
            facts = read_topics(spec.kafka, sorted(set(partitions) | set(committed)))
        except SourceAccessError as error:
            return [f"{error}: a restarted stream could not read its topics either; fix the spec's kafka access"]
        partitions = {topic: f.partition_count for topic, f in facts.items()}
        lag = consumer_lag(committed, facts)
        found.update(
            partitions=partitions, read_from="the brokers", lag=lag.total, unread_partitions=lag.unread_partitions
        )
    mapping = {**stream.definition().knob_options, **spec.knob_options}
    if mapping.get("source_partitions") == MIN_PARTITIONS_OPTION:
        problems += partition_problems(r.target.partitioning.source_partitions, partitions)
    if r.needs_migration and r.strategy in ("replay", "precopy"):
        needed = replay_start_positions(checkpoint, 0, indexes) if r.strategy == "replay" else committed
        what = "a replay from batch 0" if r.strategy == "replay" else "a precopy's replay since its copy"
        if facts is not None:
            problems += retention_problems(needed, facts, what)
        elif r.strategy == "replay":
            problems.append(
                f"{what} reads the Kafka topics {sorted(partitions)} from the stream's first offsets, and without "
                "the spec's kafka access the control plane cannot check that retention still keeps them: set "
                "kafka.bootstrap_servers in the spec, or use strategy 'native'"
            )
    return problems


def repeat_bound(progress: dict[str, Any] | None, sink: str) -> str | None:
    """What a stop in the middle of a batch may write twice to an at-least-once Kafka sink (None: another sink)."""
    if sink != "kafka":
        return None
    rows = int(((progress or {}).get("sink") or {}).get("numOutputRows", -1))
    size = f"up to {rows:,} records (the last batch's output)" if rows >= 0 else "up to one batch's output"
    return (
        f"the Kafka sink is at-least-once: a reconfiguration stops at a batch boundary and repeats nothing, but a "
        f"stop in the middle of a batch (a crash, a forced stop) makes the batch run again and may repeat {size}"
    )
