"""Read Spark event logs as Spark writes them, incrementally.

Layouts: a single file (``local-123``, ``app-...``), or a rolling directory
``eventlog_v2_<app>/events_<n>_<app>[.codec]`` (Spark 4's default), each possibly
still being written (``.inprogress``), in any codec Spark writes (:mod:`dagster_reconf.core.traces.codecs`).
This module holds the layout, the cursor and the line reader; whole logs as Arrow tables are
:mod:`dagster_reconf.core.traces.event_table`'s.

Incremental: a :class:`LogCursor` names the file and how many *decompressed* bytes of
it were consumed. A compressed file cannot be entered mid-stream, so a growing file is
decompressed from its start and the consumed prefix skipped (decompression is cheap
next to JSON parsing, which only happens for new lines); files a rolling log has moved
past are never opened again. A torn last line, or an incomplete compressed frame at
the end of a file being written, is left for the next read.
"""

from __future__ import annotations

import gc
import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from dagster_reconf.core.errors import EventLogError
from dagster_reconf.core.store.storage import Location, location_of
from dagster_reconf.core.traces.codecs import CHUNK_BYTES, decompressed

__all__ = [
    "EventLogError",
    "LogCursor",
    "ReadResult",
    "check_is_event_log",
    "file_completed",
    "files_after",
    "gc_paused",
    "log_files",
    "read_events",
]

_ROLLING_DIR = re.compile(r"^eventlog_v2_(?P<app>.+)$")
_ROLLING_FILE = re.compile(r"^events_(?P<index>\d+)_(?P<app>.+?)(\.(?P<codec>lz4|lzf|snappy|zstd))?(\.inprogress)?$")
_EVENT_HEAD = b'{"Event":"'  # how Spark starts every line: the type can be read without parsing
_HEAD_LINES = 10  # lines looked at to tell a (possibly damaged) event log from another file


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small objects.

    Parsing an event log creates millions of dicts and lists with no cycles; every
    few hundred the collector rescans the growing heap. Pausing it made parsing 3.6x
    faster (0.43 s -> 0.12 s for 20k task events). Reference counting still frees
    memory; the collector is restored (not forced on) afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class LogCursor:
    """How far an event log has been read: a file name and decompressed bytes consumed.

    ``complete``: the file was read to its end after Spark finished writing it, so it
    is never opened again (a file read whole by DuckDB has no byte offset to keep).
    """

    file: str | None = None
    offset: int = 0
    version: int = 1
    complete: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {"version": self.version, "file": self.file, "offset": self.offset, "complete": self.complete}
        )

    @classmethod
    def from_json(cls, raw: str | None) -> "LogCursor":
        if not raw:
            return cls()
        data = json.loads(raw)
        if data.get("version") != 1:
            raise EventLogError(f"unsupported event log cursor version in {raw!r}; reset the cursor")
        return cls(file=data.get("file"), offset=int(data.get("offset", 0)), complete=bool(data.get("complete", False)))


@dataclass
class ReadResult:
    """Events read, the cursor to continue from, and what was skipped and why."""

    events: list[dict[str, Any]]
    cursor: LogCursor
    skipped: dict[str, int] = field(default_factory=dict)
    raw: list[bytes] = field(default_factory=list)  # lines of the types asked for raw, unparsed, in order

    @property
    def events_read(self) -> int:
        return len(self.events) + len(self.raw)


def log_files(path: Location | str) -> list[Location]:
    """The files of one application's event log, in write order.

    Raises:
        EventLogError: ``path`` does not exist or is a directory that is not a rolling event log.
    """
    path = location_of(path)
    if path.is_file():
        return [path]
    if path.is_dir() and _ROLLING_DIR.match(path.name):
        files = [(int(m.group("index")), p) for p in path.iterdir() if (m := _ROLLING_FILE.match(p.name))]
        return [p for _, p in sorted(files)]
    if path.is_dir():
        raise EventLogError(
            f"{path} is a directory but not a rolling event log (eventlog_v2_<app>); pass one application's log "
            "file or eventlog_v2_ directory"
        )
    raise EventLogError(f"event log {path} does not exist")


def file_completed(files: list[Location], index: int, rolling: bool) -> bool:
    """Whether Spark writes no more to ``files[index]``.

    A single-file log is renamed from ``x.inprogress`` to ``x`` when its application
    ends. A rolling log's files keep their names: all but the last are done, and the
    last is done once the directory's ``appstatus_<app>`` marker lost its ``.inprogress``.
    """
    file = files[index]
    if file.name.endswith(".inprogress"):
        return False
    if not rolling or index < len(files) - 1:
        return True
    markers = [p.name for p in file.parent.iterdir() if p.name.startswith("appstatus_")]
    return bool(markers) and not any(name.endswith(".inprogress") for name in markers)


def read_events(
    path: Location | str,
    cursor: LogCursor | None = None,
    *,
    max_events: int | None = None,
    only: frozenset[str] | None = None,
    raw: frozenset[str] = frozenset(),
) -> ReadResult:
    """Events after ``cursor`` in the event log at ``path`` (a file or a rolling directory).

    Lines that are not JSON objects with an ``Event`` field are counted in
    ``skipped`` (key ``corrupt_line``), never returned; a log whose first line is not a
    Spark event is refused.

    Args:
        path: one application's event log (file or ``eventlog_v2_*`` directory).
        cursor: where the last read stopped (default: the beginning).
        max_events: stop after this many events (the cursor then points just past them).
        only: event types to return; the others are counted in ``skipped`` as
            ``event not used: <type>`` without being parsed (Spark writes ``{"Event":...``
            first, so the type is read from the line's start).
        raw: event types to hand back unparsed in ``raw`` (for a columnar parser);
            ``max_events`` counts them too.

    Raises:
        EventLogError: not an event log, unknown codec, or a cursor naming a file that is gone.
    """
    cursor = cursor or LogCursor()
    files, start, rolling = files_after(path, cursor)
    wanted = frozenset(name.encode() for name in only) if only is not None else None
    with gc_paused():
        return _read_files(files, start, rolling, cursor, max_events, wanted, frozenset(n.encode() for n in raw))


def files_after(path: Location | str, cursor: LogCursor) -> tuple[list[Location], int, bool]:
    """The log's files, the index of the one ``cursor`` is in, and whether the log is a rolling one."""
    files = log_files(path)
    rolling = location_of(path).is_dir()
    if cursor.file is None:
        return files, 0, rolling
    # An in-progress file is renamed when it completes; match on the name without the suffix.
    stems = [f.name.removesuffix(".inprogress") for f in files]
    stem = cursor.file.removesuffix(".inprogress")
    if stem not in stems:
        raise EventLogError(f"event log cursor names {cursor.file!r}, which is not in {path}; reset the cursor")
    return files, stems.index(stem), rolling


def _read_files(
    files: list[Location],
    start: int,
    rolling: bool,
    cursor: LogCursor,
    max_events: int | None,
    wanted: frozenset[bytes] | None,
    raw: frozenset[bytes],
) -> ReadResult:
    events: list[dict[str, Any]] = []
    raw_lines: list[bytes] = []
    skipped: dict[str, int] = {}
    # The common case, one raw type: recognize its lines by their exact start.
    raw_head = _EVENT_HEAD + next(iter(raw)) + b'"' if len(raw) == 1 else None
    position = cursor
    for index in range(start + cursor.complete, len(files)):
        file = files[index]
        complete = file_completed(files, index, rolling)
        damage: Counter = Counter()
        data = decompressed(file, damage, complete)
        for reason, count in (damage if complete else {}).items():  # counted once: on the read that finishes the file
            skipped[reason] = skipped.get(reason, 0) + count
        offset = cursor.offset if index == start and cursor.file is not None else 0
        if index == 0 and offset == 0:
            check_is_event_log(file, data)
        end = data.rfind(b"\n") + 1
        for line in data[offset:end].split(b"\n")[:-1]:
            offset += len(line) + 1
            if raw_head is not None and line.startswith(raw_head):
                raw_lines.append(line)
                if max_events is not None and len(events) + len(raw_lines) >= max_events:
                    return ReadResult(events, LogCursor(file.name, offset), skipped, raw_lines)
                continue
            if not line or line.isspace():
                continue
            if line.startswith(_EVENT_HEAD) and (wanted is not None or raw):
                name = line[len(_EVENT_HEAD) : line.find(b'"', len(_EVENT_HEAD))]
                if name in raw:
                    raw_lines.append(line)
                    if max_events is not None and len(events) + len(raw_lines) >= max_events:
                        return ReadResult(events, LogCursor(file.name, offset), skipped, raw_lines)
                    continue
                if wanted is not None and name not in wanted:
                    try:
                        key = "event not used: " + name.decode()
                    except UnicodeDecodeError:  # a damaged event type
                        key = "corrupt_line"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                skipped["corrupt_line"] = skipped.get("corrupt_line", 0) + 1
                continue
            if not isinstance(event, dict) or not isinstance(event.get("Event"), str):
                skipped["not_an_event"] = skipped.get("not_an_event", 0) + 1
                continue
            name = event["Event"].encode()  # a line not written as Spark writes them: filter it the same way
            if name in raw:
                raw_lines.append(line)
            elif wanted is not None and name not in wanted:
                key = "event not used: " + event["Event"]
                skipped[key] = skipped.get(key, 0) + 1
                continue
            else:
                events.append(event)
            if max_events is not None and len(events) + len(raw_lines) >= max_events:
                return ReadResult(events, LogCursor(file.name, offset), skipped, raw_lines)
        if complete and data[offset:].strip():  # a finished file whose last line never got its newline: damaged
            skipped["truncated last line"] = skipped.get("truncated last line", 0) + 1
            offset = len(data)
        position = LogCursor(file.name, offset, complete=offset == len(data) and complete)
    return ReadResult(events, position, skipped, raw_lines)


def check_is_event_log(file: Location, data: bytes) -> None:
    """Refuse a file that is not a Spark event log: none of its first complete lines is a Spark listener event.

    A damaged first line alone does not make a log something else: any of the first
    :data:`_HEAD_LINES` will do. A file with no complete line yet is not judged.
    """
    head = data[:CHUNK_BYTES]
    lines = [line.strip() for line in head[: head.rfind(b"\n") + 1].split(b"\n")[:_HEAD_LINES] if line.strip()]
    if not lines:
        return
    for line in lines:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and str(event.get("Event", "")).startswith("SparkListener"):
            return
    raise EventLogError(
        f"{file} is not a Spark event log: none of its first {len(lines)} lines is a Spark listener event "
        f"(the first: {lines[0][:80]!r}); is the codec suffix right?"
    )
