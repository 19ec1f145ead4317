"""A control plane's copy of a driver's metrics store, pulled over the control endpoint.

Why: the metrics store is a file the driver appends to under a file lock, which holds only
on one host. A control plane on another host (the Dagster daemon's) therefore never opens
the driver's file: it asks the driver for the records after its cursor (``POST /v1/metrics``)
and appends them to a store of its own, in its own runtime home, that only it writes. The
sensors and reconfigurations there read that copy as they read a local stream's store.
The cursor into the driver's history is kept beside the copy, with the store it points
into (host and path), so each pull moves only what is new; a driver with another store (a
new host or home) or one younger than the cursor is read again from its recent tail, and
the pull says so.
"""

from __future__ import annotations

import fcntl
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from dagster_reconf.core.errors import ControlRequestError
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.endpoint_record import remote_client
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths

__all__ = ["MirrorPull", "PulledMetricsStore", "metrics_since", "pull_metrics", "pulled_store"]

PULL_MAX_BYTES = 1 << 20


def metrics_since(store: MetricsStore, cursor: int | None, max_bytes: int, source: str | None = None) -> dict[str, Any]:
    """The driver's answer to ``POST /v1/metrics``: records after ``cursor``, bounded by ``max_bytes``.

    A cursor into another store (``source``: a driver on a new host or home) or past this one's end means nothing
    here: the store is read from its tail instead, and the answer says records were skipped."""
    own = f"{socket.gethostname()}:{store.path.resolve()}"
    foreign = cursor is not None and ((source is not None and source != own) or cursor > store.size())
    records, after, skipped = store.read_bounded(None if foreign else cursor, max_bytes)
    return {"records": records, "cursor": after, "skipped": skipped or foreign, "source": own}


class _Cursor(BaseModel):
    remote: int
    source: str


@dataclass(frozen=True)
class MirrorPull:
    """What one pull moved."""

    records: int
    cursor: int  # into the driver's history, after the last record copied
    skipped: bool  # records between the old cursor and the ones copied were left out (too far behind, or restarted)


def pull_metrics(
    client: ControlClient, mirror: MetricsStore, cursor_file: Path, max_bytes: int = PULL_MAX_BYTES
) -> MirrorPull:
    """Copy the driver's records after the saved cursor into ``mirror``, then save the new cursor.

    A record is appended before the cursor moves past it: a pull that dies in between copies it again next time
    (at least once), never loses it. Pulls into one copy take turns (a file lock beside the cursor: the sensor's and
    a run's processes share the copy on this host), so none copies what another just did."""
    cursor_file.parent.mkdir(parents=True, exist_ok=True)
    with open(cursor_file.with_name(cursor_file.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _pull(client, mirror, cursor_file, max_bytes)


def _pull(client: ControlClient, mirror: MetricsStore, cursor_file: Path, max_bytes: int) -> MirrorPull:
    try:
        saved: _Cursor | None = _Cursor.model_validate_json(cursor_file.read_text())
    except (FileNotFoundError, ValidationError, ValueError):
        saved = None
    answer = client.metrics(saved.remote if saved else None, max_bytes, saved.source if saved else None)
    for record in answer["records"]:
        mirror.append(record)  # the driver's recorded_at is kept: the record's own fields win
    replace_text(cursor_file, _Cursor(remote=int(answer["cursor"]), source=answer["source"]).model_dump_json())
    return MirrorPull(len(answer["records"]), int(answer["cursor"]), bool(answer["skipped"]))


class PulledMetricsStore(MetricsStore):
    """This host's copy of a remote driver's store: every read pulls what is new first.

    A pull that fails (the driver is down or unreachable) leaves the copy as it is: readers see what was copied,
    and the driver's status, asked separately, says why nothing newer came."""

    def __init__(self, path: Path, pull: Callable[[], object]) -> None:
        super().__init__(path)
        self._pull = pull

    def _refresh(self) -> None:
        try:
            self._pull()
        except (ControlRequestError, OSError):
            pass

    def read(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        self._refresh()
        return super().read(cursor)

    def last_progress(self) -> dict[str, Any] | None:
        self._refresh()
        return super().last_progress()


def pulled_store(paths: StreamPaths) -> PulledMetricsStore:
    """The copy, in this host's runtime home, of the metrics of the stream under ``paths`` whose driver runs on
    another host (found through its spec: :func:`~dagster_reconf.core.process.endpoint_record.remote_client`)."""
    cursor = paths.root / "metrics-cursor.json"

    def pull() -> MirrorPull:
        spec = StreamSpec.parse(json.loads(paths.spec.read_text()))
        return pull_metrics(remote_client(spec), MetricsStore(paths.metrics), cursor)

    return PulledMetricsStore(paths.metrics, pull)
