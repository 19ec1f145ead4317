"""Source tasks of a source with partitions of its own (a Kafka topic's): never fewer than its partitions.

Spark reads each topic partition in a task of its own; ``minPartitions`` (the source-partitions knob) only splits
them further. So a plan keeps the knob at the partitions or above, splits only where the cores outnumber the
partitions (and says so), gives a stateless stream without the knob no more cores than partitions (the rest would
idle).
"""

from __future__ import annotations

from dagster_reconf.core.scaling.scaling_plan import Knobs

__all__ = ["source_aligned_cores", "source_partitions"]


def source_partitions(current: Knobs, cores: int, floor: int | None = None) -> int | None:
    """A source split into as many partitions as there are cores, where the stream has that knob, and never into
    fewer than the source's own (``floor``)."""
    return max(cores, floor or 1) if current.source_partitions is not None else None


def source_aligned_cores(
    current: Knobs, cores: int, stateful: bool, floor: int | None, min_cores: int, notes: list[str]
) -> int:
    """The cores the plan keeps given a source of ``floor`` partitions (``notes`` gains why they moved or split)."""
    if not floor:
        return cores
    if cores > floor and current.source_partitions is not None:
        notes.append(
            f"source partitions {cores}: minPartitions splits the topic's {floor} partitions so {cores} cores all read"
        )
    elif cores > floor and not stateful:
        notes.append(
            f"cores {cores} -> {max(floor, min_cores)}: the topic's {floor} partitions are read by {floor} tasks and "
            "the stream has no source-partitions knob to split them (map it onto minPartitions), so more cores would "
            "sit idle"
        )
        return max(floor, min_cores)
    return cores
