"""A driver's Spark event logs, written on its own disk and copied to the stream's storage while it runs.

Why: Spark writes event logs through Hadoop's FileSystem, and an object store (S3A, GCS, ABFS) shows a file only once
it is closed. A rolling event log closes a file every ``spark.eventLog.rolling.maxFileSize`` (10 MiB at the least), so
a control plane on another host reading the logs from the store would see nothing of a running stream for hours, and
could plan nothing from them. So a driver whose storage is remote has Spark write them under its work folder, and
copies each file that changed (whole: an object store has no append) to ``<storage>/streams/<name>/eventlog/`` every
few seconds, and once more when its session stops, after which its disk keeps none of them; a file Spark removed or
renamed since (an application's ``.inprogress`` status file, at its end) is removed there too. Readers find the logs
where they always did, at most one interval behind.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

from dagster_reconf.core.store.storage import Location, copy_file

__all__ = ["SHIP_INTERVAL_S", "EventLogShipper"]

log = logging.getLogger(__name__)

SHIP_INTERVAL_S = 3.0


class EventLogShipper:
    """Keeps ``remote`` a copy of the event logs under ``local``, every ``interval_s`` while started."""

    def __init__(self, local: Path, remote: Location, interval_s: float = SHIP_INTERVAL_S) -> None:
        self.local, self.remote, self.interval_s = local, remote, interval_s
        self.local.mkdir(parents=True, exist_ok=True)
        self._shipped: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns) last copied
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ship_once(self) -> int:
        """Copy what changed since the last call and remove what vanished; the files copied. A store that fails is
        tried again next time (a driver never fails for its logs)."""
        with self._lock:
            return self._ship()[0]

    def ship_finished(self) -> int:
        """Once every application writing here has ended (its logs closed): copy what changed, then, where every file
        is in the store, remove them here; the files copied. The store keeps the logs; left here, a driver started
        again would copy every earlier application's logs once more, and the disk would fill. A store that fails
        leaves them here, for the next copy."""
        with self._lock:
            copied, complete = self._ship()
            if complete:  # Hadoop's checksums and temporaries go too
                for entry in self.local.iterdir():
                    if entry.is_dir():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
                self._shipped.clear()  # gone here, kept there: not files Spark removed
            return copied

    def _ship(self) -> tuple[int, bool]:
        present: dict[str, tuple[int, int]] = {}
        for path in self.local.rglob("*"):
            if path.is_file() and not path.name.startswith("."):  # Hadoop's .crc files and temporaries
                stat = path.stat()
                present[path.relative_to(self.local).as_posix()] = (stat.st_size, stat.st_mtime_ns)
        copied = 0
        try:
            for name, seen in present.items():
                if self._shipped.get(name) != seen:
                    copy_file(self.local / name, self.remote / name)
                    self._shipped[name] = seen
                    copied += 1
            for name in [n for n in self._shipped if n not in present]:
                (self.remote / name).unlink(missing_ok=True)
                del self._shipped[name]
        except OSError as exc:
            log.warning("event logs not copied to %s this time: %s", self.remote, exc)
            return copied, False
        return copied, True

    def start(self) -> EventLogShipper:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="event-log-shipper", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.ship_once()

    def stop(self) -> None:
        """Stop copying, after a last copy of everything."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.ship_once()
