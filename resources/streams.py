"""The streams this code location manages: the bundled workloads, as a user declares their own."""

from __future__ import annotations

from dagster_reconf import StreamSpec

BUNDLED_STREAMS: list[StreamSpec] = [
    StreamSpec(name="nexmark-q5", query="q5", rate=3000, source_partitions=2, state_partitions=4),
    StreamSpec(name="wordcount", query="wordcount", rate=2000, source_partitions=2, state_partitions=4),
]

STREAM_NAMES: list[str] = [spec.name for spec in BUNDLED_STREAMS]
