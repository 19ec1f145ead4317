"""The Kafka offsets a checkpoint logged, and the partitions a stream's source saw, without Spark.

Spark's Kafka source logs, per batch, one JSON line ``{"topic": {"partition": offset}}`` (the batch's end) in the
offset log, in the order of the query's sources; its initial offsets (where batch 0 starts) go to
``sources/<index>/0``. Which source lines are Kafka's is said by the stream's progress (the same order).
"""

from __future__ import annotations

import json
from typing import Any

from dagster_reconf.core.progress.source_kinds import source_kind
from dagster_reconf.core.store.checkpoint import last_committed_batch
from dagster_reconf.core.store.storage import Location

__all__ = ["Positions", "committed_positions", "kafka_source_indexes", "replay_start_positions", "topic_partitions"]

Positions = dict[str, dict[int, int]]  # topic -> partition -> offset


def kafka_source_indexes(progress: dict[str, Any] | None) -> list[int]:
    """The indexes of the Kafka sources among a progress record's ``sources`` (the offset log's order)."""
    sources = (progress or {}).get("sources") or []
    return [i for i, s in enumerate(sources) if source_kind(str(s.get("description") or "")) == "kafka"]


def _positions(value: Any) -> Positions:
    """``{"topic": {"0": 12}}`` (a dict or its JSON) as typed positions; anything else: none."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    found: Positions = {}
    for topic, partitions in value.items():
        if isinstance(partitions, dict):
            found[str(topic)] = {int(p): int(o) for p, o in partitions.items() if str(p).lstrip("-").isdigit()}
    return found


def _merge(parts: list[Positions]) -> Positions:
    merged: Positions = {}
    for part in parts:
        for topic, partitions in part.items():
            merged.setdefault(topic, {}).update(partitions)
    return merged


def committed_positions(checkpoint: Location, indexes: list[int]) -> Positions | None:
    """Where the checkpoint's last committed batch ended, per Kafka partition (None: nothing committed yet)."""
    batch = last_committed_batch(checkpoint)
    return None if batch is None else _batch_end(checkpoint, batch, indexes)


def _batch_end(checkpoint: Location, batch_id: int, indexes: list[int]) -> Positions:
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()[2:]
    return _merge([_positions(lines[i]) for i in indexes if i < len(lines) and lines[i].strip() not in ("", "-")])


def replay_start_positions(checkpoint: Location, first_batch: int, indexes: list[int]) -> Positions:
    """Where a replay from ``first_batch`` starts reading: the end of the batch before it, or for batch 0 the source's
    initial offsets (``sources/<index>/0``)."""
    if first_batch > 0:
        return _batch_end(checkpoint, first_batch - 1, indexes)
    parts = []
    for index in indexes:
        initial = checkpoint / "sources" / str(index) / "0"
        if initial.exists():  # a 0 byte, "v1", then the JSON (Spark's HDFSMetadataLog for the Kafka source)
            text = initial.read_bytes().decode("utf-8", "replace")
            parts.append(_positions(next((ln for ln in text.splitlines() if ln.lstrip().startswith("{")), "")))
    return _merge(parts)


def topic_partitions(progress: dict[str, Any] | None) -> dict[str, int]:
    """Partitions per topic the Kafka sources saw at their last batch's planning (its ``latestOffset``)."""
    sources = (progress or {}).get("sources") or []
    seen = _merge([_positions(sources[i].get("latestOffset")) for i in kafka_source_indexes(progress)])
    return {topic: len(partitions) for topic, partitions in seen.items()}
