"""Events per batch and backlog, per source kind, from Spark's source progress.

Every source reports its offsets differently: the bundled generators and other Python data
sources ``{"index": n}`` (any JSON of counters), Spark's file source ``{"logOffset": n}``
(batches of its file log, not records), the rate source seconds since it started, Kafka
``{topic: {partition: offset}}`` with ``offsetsBehindLatest`` metrics. A
:class:`SourceFigures` says, in one unit (events), how many a batch consumed and how many
wait behind it, or that the backlog is unknown; the scaling policy, DS2 and the observe step
read only those figures.

* ``python`` (the bundled generators too): offsets whose JSON leaves are counters; the
  position is their sum, the backlog ``latest - end``.
* ``kafka``: per-partition offsets summed; the backlog ``latest - end`` (the consumer lag),
  else ``avgOffsetsBehindLatest`` times the partitions.
* ``rate``: ``RateStreamV2`` offsets are seconds (times ``rowsPerSecond``). It has no cap: each batch takes every
  second up to its planning, so what waits behind a batch is what arrived while it ran (its duration times
  ``rowsPerSecond``); a stream that falls behind shows it as batches, and that backlog, growing. The per-micro-batch
  rate source offers exactly one batch per trigger, so it never lags.
* ``file``: the progress carries no latest offset; the driver lists the directory and
  reads the source's file log (:class:`FileBacklogProbe`) and records the files and bytes
  not yet read, turned into events by the rows per byte of the batches read so far.
* ``socket`` (``TextSocketV2``) and ``memory`` (``MemoryStream``): events from ``numInputRows``; their backlog is
  unknown (a socket's lines not yet received; a memory stream's rows not yet added), and neither can replay.
* ``unknown``: where its offsets are counters, read as events (as ``python``'s); else events from
  ``numInputRows`` and backlog None (the sensor says so).

Pure functions over progress JSON (plus the probe for files), so they are unit-tested
without Spark and read event logs of streams the control plane never started.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dagster_reconf.core.store.storage import Location, file_sizes, location_of

__all__ = ["SOURCE_KINDS", "FileBacklogProbe", "SourceFigures", "source_figures", "source_kind"]

_RATE_PER_SECOND = re.compile(r"rowsPerSecond=(\d+)")
_RAMP_UP_S = re.compile(r"rampUpTimeSeconds=(\d+)")
_FILE_PATH = re.compile(r"^FileStreamSource\[(?P<path>.*)\]$")
# The option that caps what one batch of a source kind reads, in its own unit (files, offsets, rows).
_CAPS = {
    "file": "maxFilesPerTrigger",
    "kafka": "maxOffsetsPerTrigger",
    "python": "the Python source's read limit (getDefaultReadLimit: ReadMaxRows)",
}


@dataclass(frozen=True)
class SourceFigures:
    """One source's part of a micro-batch, in events (see module docstring).

    Attributes:
        kind: ``python``, ``kafka``, ``rate``, ``rate-micro-batch``, ``file``, ``socket``, ``memory`` or
            ``unknown`` (:data:`SOURCE_KINDS`).
        description: Spark's description of the source.
        events: events the batch consumed.
        end: the source's position after the batch, where its offsets count events (else None).
        backlog: events offered but not yet consumed; None: unknown.
        detail: what the backlog is made of, by kind (files and bytes; partitions; ...).
        read_after_s: how long after the batch's start its end plus backlog were read: at planning (0) where the
            source gives its latest offsets then (Kafka, Python sources); after the batch where the driver lists a
            file source's directory then, or a rate source's backlog counts to the batch's end. Rates over positions
            placed at the batches' starts would be off by the batches' changing durations.
        units: what the batch took in the unit the source caps a batch in (files for a file source, offsets for
            Kafka, rows for a Python source); None where unknown or the source has no cap.
        cap_option: the option that caps a batch of this kind (``maxFilesPerTrigger``, ...), for the message that
            names it; None where the kind has none.
    """

    kind: str
    description: str
    events: int
    end: float | None
    backlog: float | None
    detail: dict[str, Any] = field(default_factory=dict)
    read_after_s: float = 0.0
    units: float | None = None
    cap_option: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SOURCE_KINDS = ("file", "kafka", "rate", "rate-micro-batch", "python", "socket", "memory", "unknown")


def source_kind(description: str) -> str:
    """The kind of a source, from Spark's description of it (one of :data:`SOURCE_KINDS`)."""
    head = description.split("[")[0].split("@")[0]
    if description.startswith("FileStreamSource["):
        return "file"
    if description.startswith(("KafkaV2[", "KafkaSource[", "KafkaMicroBatchStream")) or "Kafka" in head:
        return "kafka"
    if description.startswith("RateStreamV2["):
        return "rate"
    if description.startswith("RatePerMicroBatchStream["):
        return "rate-micro-batch"
    if "PythonMicroBatchStream" in description:
        return "python"
    if head.startswith(("TextSocketV2", "TextSocketSource", "TextSocketMicroBatchStream")):
        return "socket"
    if head.rsplit(".", 1)[-1].startswith(("MemoryStream", "ContinuousMemoryStream")):
        return "memory"
    return "unknown"


def _parse(offset: Any) -> Any:
    """An offset as Spark reports it: JSON text in some forms, the parsed JSON in others; None for null."""
    if isinstance(offset, str):
        try:
            return json.loads(offset)
        except json.JSONDecodeError:
            return None
    return offset


def _counters(value: Any) -> list[float] | None:
    """The numeric leaves of an offset, in a stable order; None if any leaf is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        leaves: list[float] = []
        for key in sorted(value, key=str):
            inner = _counters(value[key])
            if inner is None:
                return None
            leaves += inner
        return leaves
    return None


def _position(offset: Any) -> float | None:
    counters = _counters(_parse(offset))
    return sum(counters) if counters else None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def source_figures(
    source: dict[str, Any],
    extra: dict[str, Any] | None = None,
    batch_ms: float = 0.0,
    started_at: float | None = None,
) -> SourceFigures:
    """The figures of one entry of a progress event's ``sources`` (``extra``: what the driver measured besides;
    ``batch_ms``: the batch's duration, what an uncapped source's arrivals accrue over; ``started_at``: the batch's
    start, epoch seconds)."""
    description = str(source.get("description") or "")
    kind = source_kind(description)
    rows = _int(source.get("numInputRows"))
    if kind == "file":
        return _file(description, rows, extra or {}, batch_ms, started_at)
    if kind in ("rate", "rate-micro-batch"):
        return _rate(source, kind, description, rows, batch_ms)
    if kind in ("python", "kafka", "unknown"):
        start, end, latest = (_position(source.get(k)) for k in ("startOffset", "endOffset", "latestOffset"))
        if start is not None and end is not None and (kind != "unknown" or latest is not None):
            backlog = max(0.0, latest - end) if latest is not None else None
            detail: dict[str, Any] = {}
            if kind == "kafka":
                backlog, detail = _kafka_lag(source, backlog)
            if kind == "unknown":
                detail = {"note": "offsets read as event counters: the source's kind is not known"}
            return SourceFigures(
                kind, description, int(end - start), end, backlog, detail, units=end - start, cap_option=_CAPS.get(kind)
            )
    return SourceFigures(kind, description, rows, None, None, {"reason": _unknown_reason(kind, source)})


def _unknown_reason(kind: str, source: dict[str, Any]) -> str:
    if kind == "kafka":
        return "the Kafka source reported no offsets for this batch"
    if kind == "python":
        return "the Python source's offsets are not counters, so events and backlog cannot be derived from them"
    if kind == "socket":
        return "a socket source keeps no offsets: the lines not yet received are unknown"
    if kind == "memory":
        return "a memory stream's rows not yet added are unknown"
    return (
        f"source {source.get('description')!r} is of no kind the control plane reads offsets of (files, Kafka, "
        "rate, Python sources with counter offsets); events come from numInputRows and the backlog is unknown"
    )


def _kafka_lag(source: dict[str, Any], backlog: float | None) -> tuple[float | None, dict[str, Any]]:
    """Consumer lag: latest minus end offsets per partition, else the source's offsetsBehindLatest metrics."""
    metrics = source.get("metrics") or {}
    end, latest = _parse(source.get("endOffset")), _parse(source.get("latestOffset"))
    partitions = {
        f"{t}/{p}": o for t, parts in (end or {}).items() if isinstance(parts, dict) for p, o in parts.items()
    }
    detail: dict[str, Any] = {"partitions": len(partitions)}
    if isinstance(latest, dict) and isinstance(end, dict):
        lag = {
            f"{t}/{p}": max(0, int(o) - int((end.get(t) or {}).get(p, 0)))
            for t, parts in latest.items()
            if isinstance(parts, dict)
            for p, o in parts.items()
        }
        detail["lag_by_partition"] = lag
        detail["partitions"] = max(detail["partitions"], len(lag))
    for name in ("avgOffsetsBehindLatest", "maxOffsetsBehindLatest", "minOffsetsBehindLatest"):
        if name in metrics:
            detail[name] = float(metrics[name])
    if backlog is None and "avgOffsetsBehindLatest" in detail and detail["partitions"]:
        backlog = detail["avgOffsetsBehindLatest"] * detail["partitions"]
    return backlog, detail


def _rate(source: dict[str, Any], kind: str, description: str, rows: int, batch_ms: float) -> SourceFigures:
    if kind == "rate-micro-batch":
        end = _parse(source.get("endOffset"))
        position = float(end["offset"]) if isinstance(end, dict) and "offset" in end else None
        return SourceFigures(kind, description, rows, position, 0.0, {"note": "one batch per trigger: never behind"})
    per_second = _RATE_PER_SECOND.search(description)
    start, end, latest = (_position(source.get(k)) for k in ("startOffset", "endOffset", "latestOffset"))
    if per_second is None or end is None:
        return SourceFigures("rate", description, rows, None, None, {"reason": "rate source without offsets"})
    rps = float(per_second.group(1))
    behind = max(0.0, latest - end) if latest is not None else 0.0
    backlog = (behind + batch_ms / 1000.0) * rps  # the next batch takes what arrived while this one ran
    ramp = _RAMP_UP_S.search(description)
    ramping = ramp is not None and end < float(ramp.group(1))  # below rowsPerSecond until the ramp-up ends
    detail = {"rows_per_second": rps, **({"ramping_up": True} if ramping else {})}
    return SourceFigures("rate", description, rows, end * rps, backlog, detail, read_after_s=batch_ms / 1000.0)


def _file(
    description: str, rows: int, extra: dict[str, Any], batch_ms: float, started_at: float | None
) -> SourceFigures:
    backlog = extra.get("backlog_events")
    listed = extra.get("listed_at")  # the probe's listing; records from before it kept its time: the batch's end
    read_after_s = max(0.0, listed - started_at) if listed is not None and started_at is not None else batch_ms / 1000
    detail = {
        k: extra[k] for k in ("pending_files", "pending_bytes", "rows_per_byte", "path", "listed_at") if k in extra
    }
    if backlog is None:
        detail.setdefault("reason", "the file source reports no latest offset and its directory was not listed")
    known = None if backlog is None else float(backlog)
    files = extra.get("batch_files")
    units = float(files) if files is not None else None
    return SourceFigures(
        "file", description, rows, None, known, detail, read_after_s=read_after_s, units=units, cap_option=_CAPS["file"]
    )


class FileBacklogProbe:
    """Files and bytes a file source has not read yet, and their worth in events (runs in the driver).

    Lists the source's directory (recursively; Spark's hidden ``_``/``.`` files skipped) and
    reads the source's own file log in the checkpoint (``sources/<n>/``, compacted or not:
    every entry names a file and the log offset that took it). Files the log does not name
    are the backlog. Events per byte come from the batches seen so far: their rows over the
    bytes of the files their log offsets took.
    """

    def __init__(self, checkpoint: Location) -> None:
        self.checkpoint = checkpoint
        self._taken: dict[str, int] = {}  # file -> the log offset that took it
        self._parsed: set[str] = set()  # log files already read (a log file never changes once written)
        self._sizes: dict[str, int] = {}
        self._rows = 0.0
        self._bytes = 0.0

    def measure(self, source: dict[str, Any]) -> dict[str, Any]:
        """What the file source of one progress ``sources`` entry has not read (``{}`` for other sources)."""
        match = _FILE_PATH.match(str(source.get("description") or ""))
        if match is None:
            return {}
        path = _normal(match["path"])
        listed_at = time.time()  # the backlog below is what had arrived by now, after the batch
        listing = self._list(path)
        self._read_log()
        start, end = (_parse(source.get(k)) for k in ("startOffset", "endOffset"))
        lo = int(start["logOffset"]) if isinstance(start, dict) and "logOffset" in start else -1
        hi = int(end["logOffset"]) if isinstance(end, dict) and "logOffset" in end else lo
        rows = _int(source.get("numInputRows"))
        batch_bytes = sum(self._sizes.get(f, 0) for f, offset in self._taken.items() if lo < offset <= hi)
        if rows and batch_bytes:
            self._rows, self._bytes = self._rows + rows, self._bytes + batch_bytes
        pending = [size for name, size in listing.items() if name not in self._taken]
        batch_files = sum(1 for offset in self._taken.values() if lo < offset <= hi)
        rows_per_byte = self._rows / self._bytes if self._bytes else None
        backlog = sum(pending) * rows_per_byte if rows_per_byte is not None else (0.0 if not pending else None)
        return {
            "path": path,
            "pending_files": len(pending),
            "pending_bytes": sum(pending),
            "rows_per_byte": rows_per_byte,
            "backlog_events": None if backlog is None else round(backlog, 1),
            "listed_at": listed_at,
            "batch_files": batch_files,
        }

    def _list(self, path: str) -> dict[str, int]:
        root = location_of(path)
        try:
            sizes = file_sizes(root)
        except OSError:
            return {}
        base = str(root).rstrip("/")
        found = {
            _normal(f"{base}/{relative}"): size
            for relative, size in sizes.items()
            if not any(part.startswith(("_", ".")) for part in relative.split("/"))
        }
        self._sizes.update(found)
        return found

    def _read_log(self) -> None:
        sources = self.checkpoint / "sources"
        if not sources.is_dir():
            return
        for log in sources.iterdir():
            for entry in sorted(log.iterdir(), key=lambda p: p.name):
                key = f"{log.name}/{entry.name}"
                if key in self._parsed or entry.name.endswith((".crc", ".tmp")) or entry.name.startswith("."):
                    continue
                try:
                    lines = entry.read_text(errors="replace").splitlines()[1:]
                except OSError:  # compacted away between the listing and the read
                    continue
                for line in lines:
                    try:
                        record = json.loads(line)
                        self._taken[_normal(record["path"])] = int(record.get("batchId", -1))
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                        continue
                self._parsed.add(key)


def _normal(path: str) -> str:
    """A file path or URL, the way both Spark's log and a listing write it (``file:///x`` == ``/x``)."""
    for scheme in ("file://", "file:"):
        if path.startswith(scheme):
            path = path[len(scheme) :]
            break
    return "/" + path.lstrip("/") if not re.match(r"^[a-z0-9+.\-]+://", path) else path
