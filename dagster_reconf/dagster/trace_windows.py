"""The trace assets' windows: one dynamic partition per window in which a stream ran.

A window is named by its start in UTC (``YYYY-MM-DD-HH:MM``) and lasts ``minutes``, which
divides the hour. The sensors register windows as they read a stream's batches: the window
of each new batch, and the window in progress while a driver runs. So the asset list shows
as missing only windows in which some stream ran, from its first batch on. A time-window
partition on a fixed clock would list every window since a fixed start instead, most of
them from before any stream ran, and grow by 105,120 a year at 5 minutes whether a stream
runs or not.

Keys are registered as time goes on, so a range of keys (a backfill's range in the UI) is
a range of time; a late batch of an attached stream can add an older window after newer
ones. A daemon that was down reads the batches it missed on its next tick; a window whose
batches no sensor read (a first tick reads a stream's newest records only) is added like any
dynamic partition, in the UI or with ``instance.add_dynamic_partitions``. A stream that runs all year adds
``525_600 / minutes`` windows: 8,760 at the default hour, far under Dagster's guidance of
100,000 partitions per asset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from dagster_reconf.core.scaling.health import epoch_seconds

__all__ = ["WINDOW_FORMAT", "TraceWindows", "batch_times"]

WINDOW_FORMAT = "%Y-%m-%d-%H:%M"


@dataclass(frozen=True)
class TraceWindows:
    """The window dimension: its dynamic partitions and the windows' length."""

    partitions_def: dg.DynamicPartitionsDefinition
    minutes: int

    @classmethod
    def of(cls, name: str, minutes: int) -> TraceWindows:
        """Windows of ``minutes`` (1-60, dividing the hour) as the dynamic partitions ``name``."""
        if not isinstance(minutes, int) or minutes < 1 or minutes > 60 or 60 % minutes:
            raise ValueError(f"window_minutes must divide 60 (1, 2, 3, 5, ..., 60), got {minutes!r}")
        return cls(dg.DynamicPartitionsDefinition(name=name), minutes)

    @property
    def name(self) -> str:
        assert self.partitions_def.name is not None
        return self.partitions_def.name

    @property
    def cron(self) -> str:
        """The cron schedule that fires at each window's end."""
        if self.minutes == 60:
            return "0 * * * *"
        return "* * * * *" if self.minutes == 1 else f"*/{self.minutes} * * * *"

    def key(self, timestamp_s: float) -> str:
        """The window holding ``timestamp_s`` (epoch seconds)."""
        length = self.minutes * 60
        start = int(timestamp_s // length) * length
        return datetime.fromtimestamp(start, timezone.utc).strftime(WINDOW_FORMAT)

    def bounds_ms(self, key: str) -> tuple[float, float]:
        """The window ``key``'s start and end in epoch milliseconds; a key that is no window start is refused."""
        try:
            start = datetime.strptime(key, WINDOW_FORMAT).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            raise ValueError(f"window {key!r} is not a window start YYYY-MM-DD-HH:MM (UTC)") from None
        if self.key(start) != key:
            raise ValueError(
                f"window {key!r} does not start a {self.minutes}-minute window: the window holding it is "
                f"{self.key(start)!r}"
            )
        return start * 1000.0, (start + self.minutes * 60) * 1000.0

    def registration(self, instance: dg.DagsterInstance, timestamps: Iterable[float]) -> list[str]:
        """The windows of ``timestamps`` not yet registered, in time order (what to add)."""
        wanted = sorted({self.key(t) for t in timestamps})
        return [key for key in wanted if not instance.has_dynamic_partition(self.name, key)]

    def request(self, keys: list[str]) -> list[dg.AddDynamicPartitionsRequest]:
        """A sensor's request to add ``keys`` (none if there are none)."""
        return [dg.AddDynamicPartitionsRequest(partitions_def_name=self.name, partition_keys=keys)] if keys else []


def batch_times(records: Iterable[dict[str, Any]]) -> list[float]:
    """The start times (epoch seconds) of the batches in a stream's metrics records: Spark's progress timestamps
    (a record whose time does not parse is left out: the window in progress still registers)."""
    times = []
    for record in records:
        if record.get("kind") != "progress":
            continue
        try:
            stamp = epoch_seconds((record.get("progress") or {}).get("timestamp"))
        except (TypeError, ValueError):
            continue
        if stamp is not None:
            times.append(stamp)
    return times
