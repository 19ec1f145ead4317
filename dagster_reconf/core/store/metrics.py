"""The metrics store: an append-only JSON-lines file per stream.

Why a file of JSON lines: the driver appends one line per progress event (about one a
second), and readers in other processes (CLI, Dagster sensors) read it while the driver
runs, incrementally, from a byte cursor, with no server to keep up. Every line is
flushed and fsynced before the next batch can be reported, so a crash loses nothing
that was reported. A reader leaves a torn last line (a write in progress) for its next
read instead of failing. The file is cut into bounded segments, the oldest dropped, with
cursors that stay valid across a cut (see :class:`MetricsStore`).

Records are ``{"kind": "progress" | "lifecycle", "stream": ..., "recorded_at": ...}``
plus ``progress`` (Spark's ``StreamingQueryProgress`` JSON, and in local mode
``python_cpu_s``: the Python task workers' CPU seconds so far, ``python_cpu_samples``:
that counter sampled ten times a second since the batch before, ``python_workers``: how
many workers there are, see ``python_workers``, and ``python_task_cpu_ms``: PySpark's own CPU
per Python task on this machine, see ``python_task_cpu``)
or ``event`` (what the runtime did: started, stopped, restarted with which settings).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from dagster_reconf.core.progress.source_kinds import source_figures

__all__ = ["MetricsStore", "progress_frame", "progress_row", "record_row", "status_figures"]

_TAIL_CHUNK_BYTES = 64 * 1024
SEGMENT_BYTES = 32 << 20  # about 3.7 hours of one batch a second
KEPT_SEGMENTS = 8  # with the active one, at most 288 MiB: a day and more of history
STATUS_FIGURES = (
    "batch_id",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "backlog_events",
    "backlog_unknown",
    "source_kinds",
    "watermark",
)


class MetricsStore:
    """Append-only JSON-lines store of one stream's progress and lifecycle records, kept in bounded segments.

    A stream records a line of about 2.4 KB per batch, some 200 MB a day at one batch a
    second, so the file is cut into segments: once the active one (``path``) passes
    ``segment_bytes`` it is sealed (renamed ``path.<base>``) and a new one starts, and only
    the newest ``kept_segments`` sealed ones are kept. Cursors are offsets into the whole
    history, every segment's bytes one after another: a segment starts with a header line
    giving its base (a file without one, from before segments, has base 0), so a cursor
    stays valid across a cut, and one into a segment retention removed resumes at the
    oldest record kept. Writers in several processes (the driver, the supervisor, a
    reconfiguration) append under a shared lock and cut under an exclusive one.
    """

    def __init__(
        self, path: Path | str, segment_bytes: int = SEGMENT_BYTES, kept_segments: int = KEPT_SEGMENTS
    ) -> None:
        if segment_bytes <= 0 or kept_segments < 0:
            raise ValueError(
                f"segment_bytes must be > 0 and kept_segments >= 0, got {segment_bytes} and {kept_segments}"
            )
        self.path = Path(path)
        self.segment_bytes = segment_bytes
        self.kept_segments = kept_segments
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        """Append one record durably (flush + fsync); cut the segment where it has grown past ``segment_bytes``."""
        line = json.dumps({"recorded_at": time.time(), **record}, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                self._finish_cut()
            with self._file_lock(fcntl.LOCK_SH):
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(line)
                    fh.flush()
                    os.fsync(fh.fileno())
                    full = fh.tell() >= self.segment_bytes
            if full:
                self._cut()

    def read(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Records after ``cursor`` (an offset into the whole history), and the cursor to pass next time.

        A last line without its newline is a write in progress: it is left unread.
        A complete line that is not JSON is corruption and raises ``ValueError``.
        """
        for _ in range(_READ_TRIES):
            read = self._read(cursor)
            if read is not None:
                return read
        raise RuntimeError(f"metrics store {self.path} was cut {_READ_TRIES} times during one read; read it again")

    def _read(self, cursor: int) -> tuple[list[dict[str, Any]], int] | None:
        """:meth:`read` over one listing of the segments; None where a cut moved the active one meanwhile."""
        records: list[dict[str, Any]] = []
        segments = self.segments()
        if segments and cursor < segments[0][0]:
            cursor = segments[0][0]  # what it pointed at is gone (retention): go on from the oldest record kept
        for base, path in segments:
            try:
                with open(path, "rb") as fh:
                    if path == self.path and _base_of(fh) != base:
                        return None  # cut since the listing: this is the next segment, the listed one is sealed
                    size = fh.seek(0, os.SEEK_END)
                    if base + size <= cursor:
                        continue
                    start = max(cursor, base) - base
                    fh.seek(start)
                    data = fh.read()
            except FileNotFoundError:
                continue  # a sealed segment retention removed since the listing
            complete = data.rfind(b"\n") + 1
            for offset, raw in _lines(data[:complete], base + start):
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"metrics store {path} is corrupt at byte {offset - base}: {exc.msg}") from None
                if record.get("kind") != _SEGMENT:
                    records.append(record)
            cursor = base + start + complete
            if complete < len(data):
                break  # a write in progress: nothing after it is readable yet
        return records, cursor

    def read_bounded(self, cursor: int | None, max_bytes: int) -> tuple[list[dict[str, Any]], int, bool]:
        """:meth:`read` after ``cursor``, but of the last ``max_bytes`` at most (None: just those): the records, the
        next cursor, and whether records after ``cursor`` were left out to keep within ``max_bytes``."""
        start = self.tail_offset(max_bytes)
        skipped = cursor is not None and cursor < start
        records, after = self.read(start if cursor is None or skipped else cursor)
        return records, after, skipped

    def tail(self, max_bytes: int) -> tuple[list[dict[str, Any]], int]:
        """The records of the last ``max_bytes`` (whole lines), and the cursor after them (read on from there)."""
        return self.read(self.tail_offset(max_bytes))

    def tail_offset(self, max_bytes: int) -> int:
        """A cursor at most ``max_bytes`` before the end, at a line start (to read only the recent past)."""
        segments = self.segments()
        if not segments:
            return 0
        want = max(segments[0][0], _end(segments) - max_bytes)
        for base, path in reversed(segments):
            if base <= want:
                try:
                    with open(path, "rb") as fh:
                        if want == base:
                            return base
                        fh.seek(want - base - 1)
                        skipped = fh.readline()  # the rest of the line the byte before ``want`` is in
                        return want - 1 + len(skipped)
                except FileNotFoundError:
                    return want
        return want

    def size(self) -> int:
        """The offset after the last byte written (the end of the whole history)."""
        return _end(self.segments())

    def remove(self) -> None:
        """Delete every segment (a new stream under the same name starts from nothing)."""
        with self._lock, self._file_lock(fcntl.LOCK_EX):
            for _, path in self.segments():
                path.unlink(missing_ok=True)

    def progress(self, cursor: int = 0) -> list[dict[str, Any]]:
        """Progress records (Spark's progress event under ``progress``, and what the driver measured) after
        ``cursor``."""
        return [r for r in self.read(cursor)[0] if r.get("kind") == "progress"]

    def last_progress(self) -> dict[str, Any] | None:
        """The newest progress record, found from the end (the store grows all day).

        Reads a growing window from the end of each segment, newest first, until it holds a
        complete progress line; progress lines come every batch, so the first 64 KiB almost
        always suffice.
        """
        for _, path in reversed(self.segments()):
            try:
                found = _last_progress_in(path)
            except FileNotFoundError:
                continue
            if found is not None:
                return found
        return None

    def segments(self) -> list[tuple[int, Path]]:
        """``(base, path)`` of the sealed segments, oldest first, then the active one (absent before any record).

        The active segment's base is read before the sealed ones are listed: read after, a cut in between would
        list the next segment without the one it sealed, and a reader would skip that one's records. A cut in
        between shows as a sealed segment with the active one's base: listed again."""
        for _ in range(_READ_TRIES):
            try:
                active: int | None = _base_of(self.path)
            except FileNotFoundError:
                active = None
            sealed = self._sealed()
            if active is None or not sealed or sealed[-1][0] < active:
                return sealed + ([(active, self.path)] if active is not None else [])
        raise RuntimeError(
            f"metrics store {self.path}: sealed segment {sealed[-1][1].name} does not end before the "
            f"active one (base {active}); move the active file aside and append again"
        )

    def _sealed(self) -> list[tuple[int, Path]]:
        """``(base, path)`` of the sealed segments, oldest first."""
        sealed = []
        for path in self.path.parent.glob(self.path.name + ".*"):
            suffix = path.name[len(self.path.name) + 1 :]
            if suffix.isdigit():
                sealed.append((int(suffix), path))
        return sorted(sealed)

    def _finish_cut(self) -> None:
        """Start the active segment a writer killed in :meth:`_cut` did not: after the sealed ones end. (Opened
        without its header, it would start again at offset 0, before the sealed ones.)"""
        with self._file_lock(fcntl.LOCK_EX):
            sealed = self._sealed()
            if sealed and not self.path.exists():
                base, path = sealed[-1]
                self._start_active(base + path.stat().st_size)

    def _cut(self) -> None:
        """Seal the active segment and start the next, then drop the sealed ones past ``kept_segments``."""
        with self._file_lock(fcntl.LOCK_EX):
            try:
                base, size = _base_of(self.path), self.path.stat().st_size
            except FileNotFoundError:
                return
            if size < self.segment_bytes:
                return  # another writer cut it first
            os.rename(self.path, self.path.with_name(f"{self.path.name}.{base:015d}"))
            self._start_active(base + size)  # killed before this, the next append does it (_finish_cut)
            sealed = [path for _, path in self.segments()[:-1]]
            for path in sealed[: max(0, len(sealed) - self.kept_segments)]:
                path.unlink(missing_ok=True)

    def _start_active(self, base: int) -> None:
        """Write the active segment's header, atomically (hold the exclusive file lock)."""
        header = json.dumps({"kind": _SEGMENT, "base": base, "recorded_at": time.time()}, separators=(",", ":")) + "\n"
        tmp = self.path.with_name(self.path.name + ".next")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(header)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _file_lock(self, mode: int) -> Iterator[None]:
        """A lock shared by every process that writes this store (appends: shared; a cut: exclusive)."""
        with open(self.path.with_name(self.path.name + ".lock"), "a") as fh:
            fcntl.flock(fh.fileno(), mode)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


_SEGMENT = "segment"  # a segment's header record: its base offset
_HEADER_PREFIX = b'{"kind":"segment"'  # how a header line starts (records put "recorded_at" first)
_READ_TRIES = 5


def _end(segments: list[tuple[int, Path]]) -> int:
    """The offset after the last byte of ``segments`` (:meth:`MetricsStore.segments`)."""
    if not segments:
        return 0
    base, path = segments[-1]
    try:
        return base + path.stat().st_size
    except FileNotFoundError:
        return base


def _base_of(segment: Path | BinaryIO) -> int:
    """A segment's base offset, from its header line (0 without one: a store from before segments)."""
    if isinstance(segment, Path):
        with open(segment, "rb") as fh:
            return _base_of(fh)
    segment.seek(0)
    first = segment.readline(256)
    if first.startswith(_HEADER_PREFIX):
        return int(json.loads(first)["base"])
    return 0


def _last_progress_in(path: Path) -> dict[str, Any] | None:
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        window = _TAIL_CHUNK_BYTES
        while True:
            start = max(0, size - window)
            fh.seek(start)
            data = fh.read(size - start)
            first = data.find(b"\n") + 1 if start > 0 else 0  # skip a partial first line
            complete = data[first : data.rfind(b"\n") + 1]  # and a torn last one
            for raw in reversed(complete.split(b"\n")):
                if raw.strip():
                    record = json.loads(raw)
                    if record.get("kind") == "progress":
                        return record
            if start == 0:
                return None
            window *= 4


def _lines(data: bytes, base: int) -> Iterable[tuple[int, bytes]]:
    offset = base
    for raw in data.splitlines(keepends=True):
        if raw.strip():
            yield offset, raw
        offset += len(raw)


def progress_row(progress: dict[str, Any], sources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Flatten one ``StreamingQueryProgress`` into the figures the control plane uses.

    Events and backlog come from each source's adapter (:mod:`dagster_reconf.core.progress.source_kinds`), so they are
    in
    events whatever the source's offsets are: ``events`` is how many source events the
    batch consumed (Spark's ``num_input_rows`` counts a source once per scan, so a
    self-join reports twice its events), ``backlog_events`` how many waited behind it when
    it was planned (None when a source's backlog is unknown, with the reason in
    ``backlog_unknown``), ``end_offset``/``latest_offset`` the positions where the offsets
    count events. ``sources`` is what the driver measured besides the progress (a file
    source's unread files), one dict per source.
    """
    entries = progress.get("sources") or []
    durations = progress.get("durationMs") or {}
    batch_ms = float(durations.get("triggerExecution", 0))
    started = pd.Timestamp(progress["timestamp"]) if progress.get("timestamp") else pd.NaT
    started_at = None if started is pd.NaT else started.timestamp()
    figures = [
        source_figures(s, (sources or [])[i] if i < len(sources or []) else None, batch_ms, started_at)
        for i, s in enumerate(entries)
    ]
    known = bool(figures) and all(f.backlog is not None for f in figures)
    positions = bool(figures) and all(f.end is not None for f in figures)
    end = sum(f.end for f in figures if f.end is not None) if positions else None
    backlog = sum(f.backlog for f in figures if f.backlog is not None) if known else None
    row = {
        "batch_id": int(progress.get("batchId", -1)),
        "query_id": progress.get("id"),
        "timestamp": started,
        # An event log's progress leaves out the totals its sources carry (the listener's has both).
        "num_input_rows": int(progress.get("numInputRows", sum(int(e.get("numInputRows") or 0) for e in entries))),
        "events": sum(f.events for f in figures),
        "input_rows_per_second": float(
            progress.get("inputRowsPerSecond", sum(_rate(e, "inputRowsPerSecond") for e in entries))
        ),
        "processed_rows_per_second": float(
            progress.get("processedRowsPerSecond", sum(_rate(e, "processedRowsPerSecond") for e in entries))
        ),
        "batch_duration_ms": int(durations.get("triggerExecution", 0)),
        "add_batch_ms": int(durations.get("addBatch", 0)),
        "end_offset": end,
        "latest_offset": end + backlog if end is not None and backlog is not None else None,
        "offered_after_s": max((f.read_after_s for f in figures), default=0.0),  # when end plus backlog were read
        "backlog_events": backlog,
        "backlog_unknown": None
        if known
        else "; ".join(f.detail.get("reason", f"{f.kind} source backlog unknown") for f in figures if f.backlog is None)
        or "no source",
        "source_kinds": ",".join(f.kind for f in figures),
        # What the batch took in the unit its source caps a batch in, and that cap's option (one source only: a cap is
        # read per source).
        "batch_units": figures[0].units if len(figures) == 1 else None,
        "cap_option": figures[0].cap_option if len(figures) == 1 else None,
        # What the sources say they offer (events/s), where every one says it: a rate source's rowsPerSecond past its
        # ramp-up. Exact, where the offered position's whole seconds are not.
        "declared_rate": sum(f.detail["rows_per_second"] for f in figures)
        if figures and all("rows_per_second" in f.detail and not f.detail.get("ramping_up") for f in figures)
        else None,
        # Kafka partitions the sources saw at planning (latestOffset): a topic that gains partitions shows here.
        "kafka_partitions": sum(int(f.detail.get("partitions") or 0) for f in figures if f.kind == "kafka") or None,
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "state_rows": sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators") or []),
        # Summed over the state stores' tasks; paid per batch and partition whatever the batch's size.
        "state_commit_ms": sum(int(op.get("commitTimeMs") or 0) for op in progress.get("stateOperators") or []),
    }
    for op in progress.get("stateOperators") or []:
        row[f"state_rows.{op.get('operatorName', 'operator')}"] = int(op.get("numRowsTotal", 0))
    return row


def _rate(source: dict[str, Any], key: str) -> float:
    value = source.get(key)
    try:
        return float(value) if value is not None else 0.0
    except (TypeError, ValueError):  # Spark writes NaN as a string where no time passed
        return 0.0


def record_row(record: dict[str, Any]) -> dict[str, Any]:
    """:func:`progress_row` of one metrics-store progress record (with what the driver measured besides)."""
    return progress_row(record["progress"], record.get("sources"))


def status_figures(record: dict[str, Any] | None) -> dict[str, Any]:
    """What a status shows of the last batch (a progress record): the figures and state rows per operator."""
    row = record_row(record) if record else {}
    figures = {k: row.get(k) for k in STATUS_FIGURES}
    figures["state_rows"] = {k.split(".", 1)[1]: v for k, v in row.items() if k.startswith("state_rows.")}
    return figures


def progress_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per progress record of the metrics store (see :func:`progress_row`), ordered by batch."""
    rows = [record_row(r) for r in records if r.get("kind") == "progress"]
    if not rows:
        return pd.DataFrame(columns=["batch_id", "timestamp", "num_input_rows", "backlog_events"])
    return pd.DataFrame(rows).sort_values(["batch_id", "timestamp"]).reset_index(drop=True)
