"""The audit ledger: an append-only, hash-chained record of every reconfiguration.

Why a SQL database and a hash chain: reconfigurations change production streams, so
what happened (who asked, on what evidence, which steps ran, what was verified, how it
ended) must outlive the processes that did it and be checkable later. Records live in
a real database (a SQLite file by default, PostgreSQL by URL in production) through
SQLAlchemy, with the schema managed by Alembic. Each record carries the hash of the
one before it, so editing or deleting a record breaks the chain and
:meth:`AuditLedger.verify` says where. Database triggers refuse UPDATE and DELETE as
well; the chain catches what someone with the rights to drop them does anyway.

Contract:

* :meth:`AuditLedger.append` is safe across processes: the sequence number is the
  primary key, so two writers racing for the same number cannot both win; the loser
  retries on the new head.
* Locks: :meth:`AuditLedger.acquire_lock` lets one reconfiguration per stream hold the
  stream; the same reconfiguration (or a re-run of the same plan) takes it again.
* A truncated tail leaves a valid chain; compare :meth:`AuditLedger.head` with a head
  hash kept elsewhere (every reconfiguration's Dagster metadata carries one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from dagster_reconf.core.errors import ReconfError
from dagster_reconf.core.ledger.locks import StreamLock, StreamLocks
from dagster_reconf.core.ledger.schema import METADATA, RECORDS, VERSION_TABLE

__all__ = ["AuditLedger", "AuditRecord", "ChainReport", "LedgerError", "StreamLock", "default_ledger_url"]

GENESIS_HASH = "0" * 64
APPEND_ATTEMPTS = 20
SQLITE_BUSY_TIMEOUT_S = 30
_MIGRATIONS = Path(__file__).with_name("migrations")
_UPGRADE_LOCK = threading.Lock()


class LedgerError(ReconfError):
    """The ledger could not be opened, written or read (the message names the database and the fix)."""


def default_ledger_url(home: Path | str) -> str:
    """The embedded default: a SQLite file ``ledger.db`` in the runtime home."""
    return f"sqlite:///{Path(home).resolve() / 'ledger.db'}"


def _canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)


# The columns a record's hash covers, in the order :func:`_record_hash` takes them (all but the hash itself).
HASHED_COLUMNS = ("seq", "recorded_at", "stream", "reconfiguration_id", "kind", "step", "payload", "prev_hash")


def _record_hash(
    seq: int,
    recorded_at: float,
    stream: str,
    reconfiguration_id: str | None,
    kind: str,
    step: str | None,
    payload: str,
    prev_hash: str,
) -> str:
    fields = [
        str(seq),
        repr(float(recorded_at)),
        stream,
        reconfiguration_id or "",
        kind,
        step or "",
        payload,
        prev_hash,
    ]
    return hashlib.sha256("\x1f".join(fields).encode()).hexdigest()


@dataclass(frozen=True)
class AuditRecord:
    """One ledger record (``payload`` decoded)."""

    seq: int
    recorded_at: float
    stream: str
    reconfiguration_id: str | None
    kind: str
    step: str | None
    payload: dict[str, Any]
    prev_hash: str
    hash: str
    damage: str | None = None  # why the record cannot be trusted (edited, unlinked, unreadable); None: intact

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ChainReport:
    """What :meth:`AuditLedger.verify` found."""

    ok: bool
    records: int
    head: str
    problem: str = ""
    first_bad_seq: int | None = None


class AuditLedger:
    """The audit ledger at a SQLAlchemy ``url`` (schema created or upgraded on open).

    Args:
        url: ``sqlite:///path/ledger.db`` (default, see :func:`default_ledger_url`) or
            ``postgresql://user:password@host:port/db`` (psycopg 3 is used).

    Raises:
        LedgerError: the database cannot be reached or upgraded.
    """

    def __init__(self, url: str) -> None:
        self.url = _normalized_url(url)
        self.engine = _engine(self.url)
        self._upgrade()
        self.locks = StreamLocks(self.engine)
        self._verified = (0, GENESIS_HASH)  # the chain's prefix walked intact in this process: (last seq, its hash)

    def __repr__(self) -> str:
        return f"AuditLedger({self.engine.url.render_as_string(hide_password=True)!r})"

    def _upgrade(self) -> None:
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(_MIGRATIONS))
        with _UPGRADE_LOCK:
            for attempt in range(3):
                try:
                    with self.engine.begin() as connection:
                        config.attributes.update(connection=connection, metadata=METADATA, version_table=VERSION_TABLE)
                        command.upgrade(config, "head")
                    return
                except (OperationalError, IntegrityError) as exc:
                    # Another process created the schema at the same moment: the next attempt sees it.
                    if attempt == 2:
                        raise LedgerError(f"cannot create or upgrade the audit ledger at {self}: {exc.orig}") from None
                    time.sleep(0.2 * (attempt + 1))

    def dispose(self) -> None:
        """Close pooled connections (a new call opens new ones)."""
        self.engine.dispose()

    # -- records -------------------------------------------------------------------------------

    def append(
        self,
        *,
        stream: str,
        kind: str,
        payload: dict[str, Any] | None = None,
        reconfiguration_id: str | None = None,
        step: str | None = None,
    ) -> AuditRecord:
        """Append one record at the head of the chain and return it.

        Raises:
            LedgerError: the chain is broken (an edited, deleted or unlinked record): nothing is added to it.
        """
        self._check_chain()
        text = _canonical(payload or {})
        for _ in range(APPEND_ATTEMPTS):
            try:
                with self.engine.begin() as connection:
                    head = connection.execute(
                        sa.select(RECORDS.c.seq, RECORDS.c.hash).order_by(RECORDS.c.seq.desc()).limit(1)
                    ).first()
                    seq = (head.seq + 1) if head else 1
                    prev_hash = head.hash if head else GENESIS_HASH
                    recorded_at = round(time.time(), 6)
                    digest = _record_hash(seq, recorded_at, stream, reconfiguration_id, kind, step, text, prev_hash)
                    record = AuditRecord(
                        seq, recorded_at, stream, reconfiguration_id, kind, step, json.loads(text), prev_hash, digest
                    )
                    row = {column: getattr(record, column) for column in HASHED_COLUMNS}
                    connection.execute(RECORDS.insert().values({**row, "payload": text, "hash": digest}))
                return record
            except IntegrityError:
                continue  # another writer took this sequence number: append on the new head
            except OperationalError as exc:
                if "locked" not in str(exc.orig).lower():
                    raise LedgerError(f"cannot append to the audit ledger at {self}: {exc.orig}") from None
        raise LedgerError(
            f"could not append to the audit ledger at {self} after {APPEND_ATTEMPTS} attempts (heavy contention)"
        )

    def records(
        self,
        *,
        stream: str | None = None,
        reconfiguration_id: str | None = None,
        kinds: Sequence[str] | None = None,
        after_seq: int = 0,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[AuditRecord]:
        """Records matching every given filter, in chain order (or newest first)."""
        query = sa.select(RECORDS).where(RECORDS.c.seq > after_seq)
        if stream is not None:
            query = query.where(RECORDS.c.stream == stream)
        if reconfiguration_id is not None:
            query = query.where(RECORDS.c.reconfiguration_id == reconfiguration_id)
        if kinds is not None:
            query = query.where(RECORDS.c.kind.in_(list(kinds)))
        query = query.order_by(RECORDS.c.seq.desc() if newest_first else RECORDS.c.seq)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as connection:
            records = [_to_record(row) for row in connection.execute(query)]
            wanted = sorted({r.seq - 1 for r in records} - {0})
            hashes = {0: GENESIS_HASH}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                found = connection.execute(sa.select(RECORDS.c.seq, RECORDS.c.hash).where(RECORDS.c.seq.in_(chunk)))
                hashes.update((seq, digest) for seq, digest in found)
        return [_linked(record, hashes.get(record.seq - 1)) for record in records]

    def head(self) -> str:
        """Hash of the newest record (the genesis hash when empty)."""
        with self.engine.connect() as connection:
            value = connection.execute(sa.select(RECORDS.c.hash).order_by(RECORDS.c.seq.desc()).limit(1)).scalar()
        return value or GENESIS_HASH

    def verify(self, expect_head: str | None = None) -> ChainReport:
        """Walk the chain from the first record; report the first record that does not fit.

        Args:
            expect_head: a head hash recorded elsewhere; a chain that ends elsewhere (or
                does not contain it) is reported as truncated or rewritten.
        """
        report = self._walk(0, GENESIS_HASH, expect_head)
        if report.ok:
            self._verified = (report.records, report.head)
        return report

    def _check_chain(self) -> None:
        """Walk the records added since the last walk (all of them the first time in this process)."""
        seq, head = self._verified
        report = self._walk(seq, head, None)
        if not report.ok:
            raise LedgerError(
                f"the audit ledger at {self} has a broken chain ({report.problem}); nothing is appended to it. "
                "Run `reconf audit verify` and restore the ledger from a backup, or start a new ledger"
            )
        self._verified = (report.records, report.head)

    def _walk(self, after_seq: int, previous: str, expect_head: str | None) -> ChainReport:
        count, seen_expected = after_seq, expect_head is None
        for row in self._rows(after_seq):
            count += 1
            if row.seq != count:
                return ChainReport(
                    False,
                    count,
                    previous,
                    f"record {count} is missing (next record is {row.seq}): records were deleted",
                    count,
                )
            if row.prev_hash != previous:
                return ChainReport(
                    False,
                    count,
                    previous,
                    f"record {row.seq} does not follow record {row.seq - 1} "
                    "(its prev_hash differs): the chain was rewritten",
                    row.seq,
                )
            digest = _record_hash(*(getattr(row, column) for column in HASHED_COLUMNS))
            if digest != row.hash:
                return ChainReport(
                    False,
                    count,
                    previous,
                    f"record {row.seq} ({row.kind}, stream {row.stream!r}) was "
                    "edited: its contents do not match its hash",
                    row.seq,
                )
            previous = row.hash
            seen_expected = seen_expected or row.hash == expect_head
        if not seen_expected:
            return ChainReport(
                False,
                count,
                previous,
                f"expected head {expect_head} is not in the chain: records at the "
                "end were removed or the ledger was replaced",
            )
        return ChainReport(True, count, previous)

    def _rows(self, after_seq: int = 0) -> Iterator[sa.Row]:
        with self.engine.connect() as connection:
            query = sa.select(RECORDS).where(RECORDS.c.seq > after_seq).order_by(RECORDS.c.seq)
            yield from connection.execution_options(yield_per=1000).execute(query)

    # -- locks --------------------------------------------------------------------------------

    def acquire_lock(
        self, *, stream: str, reconfiguration_id: str, plan_hash: str, holder: str, owner: str | None = None
    ) -> StreamLock:
        """Take the stream for ``reconfiguration_id`` (:meth:`StreamLocks.acquire`)."""
        return self.locks.acquire(
            stream=stream, reconfiguration_id=reconfiguration_id, plan_hash=plan_hash, holder=holder, owner=owner
        )

    def lock(self, stream: str) -> StreamLock | None:
        """The lock on ``stream``, if any."""
        return self.locks.get(stream)

    def release_lock(self, stream: str, reconfiguration_id: str) -> bool:
        """Release the stream if ``reconfiguration_id`` holds it; True if it did."""
        return self.locks.release(stream, reconfiguration_id)


def _to_record(row: sa.Row) -> AuditRecord:
    """The record as stored, its damage named: a payload that does not parse, or contents that do not match the
    hash (an edit)."""
    damage = None
    try:
        payload = json.loads(row.payload)
        if not isinstance(payload, dict):
            raise ValueError(f"a JSON {type(payload).__name__}")
    except (ValueError, TypeError) as exc:
        payload, damage = {"unreadable": str(row.payload)[:200]}, f"its payload is not a JSON object ({exc})"
    if _record_hash(*(getattr(row, column) for column in HASHED_COLUMNS)) != row.hash:
        damage = "edited: its contents do not match its hash"
    return AuditRecord(**{**row._asdict(), "payload": payload, "damage": damage})


def _linked(record: AuditRecord, previous_hash: str | None) -> AuditRecord:
    """``record``, damaged where it does not follow the record before it (a deletion or rewrite)."""
    if record.damage is not None or previous_hash == record.prev_hash:
        return record
    if previous_hash is None:
        return dataclasses.replace(record, damage=f"record {record.seq - 1} before it is missing: records were deleted")
    return dataclasses.replace(record, damage=f"it does not follow record {record.seq - 1}: the chain was rewritten")


def _normalized_url(url: str) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise LedgerError(
            f"ledger url {url!r} is not a database URL; use sqlite:///path/ledger.db or "
            "postgresql://user:password@host:port/database"
        )
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _private_file(path: Path) -> None:
    """The ledger's SQLite file, readable by its owner only (0600; SQLite gives its journal files the same mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        if path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
            path.chmod(0o600)
    except OSError as exc:
        raise LedgerError(f"cannot create the audit ledger's file {path}: {exc.strerror}") from None


def _engine(url: str) -> Engine:
    try:
        if url.startswith("sqlite"):
            path = url.split(":///", 1)[1] if ":///" in url else ""
            if path and path != ":memory:":
                _private_file(Path(path))
            engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

            @sa.event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_connection: Any, _: Any) -> None:
                cursor = dbapi_connection.cursor()
                cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
                cursor.execute("PRAGMA synchronous=FULL")  # an appended record survives a power cut
                cursor.close()

            return engine
        return sa.create_engine(url, pool_pre_ping=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise LedgerError(f"cannot open ledger url {url!r}: {exc}") from None
