"""Where a managed stream keeps its files.

Everything about one stream lives under ``<home>/streams/<name>/`` so any process
(the CLI, a Dagster sensor, a later driver) can find it again from the name alone.
The home defaults to ``$RECONF_HOME`` or ``./.reconf``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.storage import Location, location, location_of, remove_tree, write_whole

__all__ = ["StreamPaths", "default_home", "remove_generations", "storage_root"]

HOME_ENV = "RECONF_HOME"


def default_home() -> Path:
    """``$RECONF_HOME`` if set, else ``./.reconf`` (absolute)."""
    return Path(os.environ.get(HOME_ENV, ".reconf")).resolve()


def storage_root(storage: str, name: str) -> Location:
    """Where stream ``name`` keeps its checkpoints, event logs and published endpoint under the storage URL."""
    return location(storage) / "streams" / name


@dataclass(frozen=True)
class StreamPaths:
    """The files of one stream under ``home``; its checkpoints and event logs under its spec's ``storage`` URL if
    set."""

    home: Path
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home))  # a str home (from a config, an env var) works as well
        if (
            not isinstance(self.name, str)
            or not self.name
            or self.name in (".", "..")
            or "/" in self.name
            or "\\" in self.name
        ):
            raise SpecError(
                f"stream name {self.name!r} cannot name a folder under {self.home / 'streams'}: "
                "give the stream's name from its spec (lowercase letters, digits, - and _)"
            )

    @property
    def root(self) -> Path:
        return self.home / "streams" / self.name

    @property
    def spec(self) -> Path:
        """The stream spec currently in force (JSON)."""
        return self.root / "spec.json"

    def write_spec(self, spec_json: str) -> None:
        """Replace the spec in force atomically: sensors and runs read it (and the storage in it) at any time."""
        replace_text(self.spec, spec_json)

    @property
    def attached(self) -> Path:
        """An attached stream's event-log location and filter (absent: a managed stream)."""
        return self.root / "attached.json"

    @property
    def cursors(self) -> Path:
        """How far an attached stream's event logs have been read, per application log."""
        return self.root / "attached-cursors.json"

    @property
    def token(self) -> Path:
        """The control endpoint's secret (mode 0600)."""
        return self.root / "token"

    @property
    def driver(self) -> Path:
        """pid, control port, Spark app id and UI of the running driver (JSON)."""
        return self.root / "driver.json"

    @property
    def standby(self) -> Path:
        """A warm standby driver's record (as ``driver.json``) until it takes the stream over in a reconfiguration."""
        return self.root / "standby.json"

    @property
    def standby_spec(self) -> Path:
        """The settings a standby driver starts its SparkContext with: the spec in force plus the session changes."""
        return self.root / "standby-spec.json"

    @property
    def driver_log(self) -> Path:
        return self.root / "driver.log"

    @property
    def metrics(self) -> Path:
        """Append-only JSON lines: every progress event and lifecycle event."""
        return self.root / "metrics.jsonl"

    @property
    def generation_file(self) -> Location:
        """Which checkpoint generation is in force (absent: generation 0). Beside the checkpoints, so that every host
        that reads them (a control plane elsewhere, a restarted driver) reads the same."""
        return self.data_root_for(self.storage) / "generation.json"

    @property
    def generation(self) -> int:
        """The checkpoint generation in force: a replay migration starts a new one."""
        for path in (self.generation_file, self.root / "generation.json"):  # then where earlier releases kept it
            try:
                return int(json.loads(path.read_text())["generation"])
            except FileNotFoundError:
                continue
        return 0

    def set_generation(self, generation: int) -> None:
        """Switch to checkpoint generation ``generation`` (atomically)."""
        write_whole(self.generation_file, json.dumps({"generation": generation}))

    @property
    def storage(self) -> str | None:
        """The spec's ``storage`` URL (None: checkpoints and event logs live under :attr:`root`).

        Read once the spec exists, then remembered: a stream's storage never changes
        (:func:`~dagster_reconf.core.spec.restart_scope` refuses it).
        """
        if "_storage" in self.__dict__:
            return self.__dict__["_storage"]
        try:
            storage = json.loads(self.spec.read_text()).get("storage")
        except FileNotFoundError:
            return None  # not written yet: ask again next time
        self.__dict__["_storage"] = storage  # a frozen dataclass still has its own __dict__
        return storage

    def data_root_for(self, storage: str | None) -> Location:
        """Where checkpoints and event logs live for a spec with ``storage``."""
        return self.root if storage is None else storage_root(storage, self.name)

    def checkpoint_of(self, generation: int) -> Location:
        return self.data_root_for(self.storage) / ("checkpoint" if generation == 0 else f"checkpoint.g{generation}")

    @property
    def checkpoint(self) -> Location:
        """The checkpoint of the generation in force."""
        return self.checkpoint_of(self.generation)

    @property
    def query_ids_file(self) -> Location:
        """Every query id the stream has run under (a new checkpoint generation brings a new one), beside its
        checkpoints: the trace store of a control plane on another host keys the stream's activities by them."""
        return self.data_root_for(self.storage) / "queries.json"

    @property
    def query_ids(self) -> list[str]:
        """The stream's query ids, oldest first (traces key activities by them; helper queries have others)."""
        for path in (self.query_ids_file, self.root / "queries.json"):  # then where earlier releases kept them
            try:
                return list(json.loads(path.read_text()))
            except FileNotFoundError:
                continue
            except json.JSONDecodeError:
                return []
        return []

    def add_query_id(self, query_id: str) -> None:
        ids = self.query_ids
        if query_id not in ids:
            write_whole(self.query_ids_file, json.dumps([*ids, query_id]))

    @property
    def work(self) -> Path:
        """A local directory of the stream's own code (``StreamContext.work_dir``): files it keeps between starts."""
        return self.root / "work"

    @property
    def driver_temp(self) -> Path:
        """Local temporary files of the stream's driver processes, a ``driver-<pid>`` folder each (the JVM's
        ``java.io.tmpdir`` and Spark's local dirs): a driver killed with ``kill -9`` leaves its JVM's files (about
        30 MB: native libraries, block manager dirs) here, where the supervisor removes them, not in ``/tmp``."""
        return self.root / "tmp"

    def driver_temp_of(self, pid: int) -> Path:
        """The temporary folder of the driver process ``pid`` (see :attr:`driver_temp`)."""
        return self.driver_temp / f"driver-{pid}"

    @property
    def reconfigurations(self) -> Path:
        """Files a reconfiguration keeps until it ends (checkpoint manifests and metadata copies)."""
        return self.root / "reconfigurations"

    @property
    def event_log(self) -> Location:
        """Where the stream's drivers write Spark event logs (an attached stream's: where its application writes
        them)."""
        if self.attached.is_file():
            return location_of(json.loads(self.attached.read_text())["event_logs"])
        return self.data_root_for(self.storage) / "eventlog"

    @property
    def traces(self) -> Path:
        """The trace store: ingested activities and the event-log cursors."""
        return self.root / "traces"

    def create(self) -> None:
        for directory in (self.root, self.work):
            directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    @classmethod
    def all(cls, home: Path) -> list["StreamPaths"]:
        """Every stream under ``home`` (managed: a spec; attached: an event-log location), by name."""
        streams = home / "streams"
        if not streams.is_dir():
            return []
        return [
            cls(home, p.name)
            for p in sorted(streams.iterdir())
            if (p / "spec.json").is_file() or (p / "attached.json").is_file()
        ]


def remove_generations(paths: StreamPaths, generations: Iterable[int]) -> list[str]:
    """Remove the checkpoints of ``generations`` that exist (not the one in force); returns what was removed."""
    removed = []
    for generation in generations:
        path = paths.checkpoint_of(generation)
        if path.exists():
            remove_tree(path)
            removed.append(str(path))
    return removed
