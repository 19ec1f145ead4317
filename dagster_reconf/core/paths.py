"""Where a managed stream keeps its files.

Everything about one stream lives under ``<home>/streams/<name>/`` so any process
(the CLI, a Dagster sensor, a later driver) can find it again from the name alone.
The home defaults to ``$RECONF_HOME`` or ``./.reconf``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["StreamPaths", "default_home"]

HOME_ENV = "RECONF_HOME"


def default_home() -> Path:
    """``$RECONF_HOME`` if set, else ``./.reconf`` (absolute)."""
    return Path(os.environ.get(HOME_ENV, ".reconf")).resolve()


@dataclass(frozen=True)
class StreamPaths:
    """The files of one stream under ``home``."""

    home: Path
    name: str

    @property
    def root(self) -> Path:
        return self.home / "streams" / self.name

    @property
    def spec(self) -> Path:
        """The stream spec currently in force (JSON)."""
        return self.root / "spec.json"

    @property
    def token(self) -> Path:
        """The control endpoint's secret (mode 0600)."""
        return self.root / "token"

    @property
    def driver(self) -> Path:
        """pid, control port, Spark app id and UI of the running driver (JSON)."""
        return self.root / "driver.json"

    @property
    def driver_log(self) -> Path:
        return self.root / "driver.log"

    @property
    def pacing(self) -> Path:
        """The source's pacing anchor, kept across restarts so backlog survives them."""
        return self.root / "pacing.json"

    @property
    def metrics(self) -> Path:
        """Append-only JSON lines: every progress event and lifecycle event."""
        return self.root / "metrics.jsonl"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def event_log(self) -> Path:
        return self.root / "eventlog"

    @property
    def traces(self) -> Path:
        """The trace store: ingested activities and the event-log cursors."""
        return self.root / "traces"

    @property
    def gate(self) -> Path:
        """While this file exists the source offers no new data (stop at a batch boundary)."""
        return self.root / "gate"

    def create(self) -> None:
        for directory in (self.root, self.output, self.event_log):
            directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    @classmethod
    def all(cls, home: Path) -> list["StreamPaths"]:
        """Every stream that has a spec under ``home``, by name."""
        streams = home / "streams"
        if not streams.is_dir():
            return []
        return [cls(home, p.name) for p in sorted(streams.iterdir()) if (p / "spec.json").is_file()]
