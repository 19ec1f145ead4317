"""One reconfiguration per stream: the lock that names it, and the lease that names the process running its step.

The lock lives from a reconfiguration's start to its end; a re-run of the same plan continues it. The lease is
shorter: a process takes it to run a step, heartbeats every :data:`HEARTBEAT_S` while the step runs, and gives it
back after (a Dagster run, whose steps are separate processes, names itself as the owner and keeps it between
them). A second process (a re-run of the same plan, a second Dagster run) gets the lease only when it is free,
its owner's heartbeat is older than :data:`LEASE_S`, or its owner is provably gone (a dead process on this host).
So two runs never run steps side by side, and a crashed one is taken over.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from dagster_reconf.core.errors import ReconfigurationRefused
from dagster_reconf.core.ledger.schema import LOCKS

__all__ = ["HEARTBEAT_S", "LEASE_S", "StreamLock", "StreamLocks", "owner_gone", "this_process"]

LEASE_S = 30.0  # a lease whose owner has not heartbeated for this long is free
HEARTBEAT_S = 5.0


def this_process() -> str:
    """This thread of this process as a lease owner: ``host:pid:start time/thread`` (the start time tells a reused
    pid apart; the thread, two runs in one process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time():.3f}/{threading.get_ident()}"


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (see :func:`this_process`) is provably gone: a process of this host that no longer runs."""
    host, _, rest = owner.partition("/")[0].partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another host's process: only its heartbeat can tell
    try:
        return abs(psutil.Process(int(pid)).create_time() - float(started or 0)) > 0.01
    except (psutil.NoSuchProcess, ValueError):
        return True


@dataclass(frozen=True)
class StreamLock:
    """The reconfiguration holding a stream, and the process running its step (if any)."""

    stream: str
    reconfiguration_id: str
    plan_hash: str
    holder: str
    acquired_at: float
    owner: str | None = None
    heartbeat_at: float | None = None

    def lease_holder(self, me: str, now: float | None = None) -> str | None:
        """Who holds the lease against ``me``, in words (None: it is free for ``me``)."""
        if self.owner is None or self.owner == me:
            return None
        age = (now or time.time()) - (self.heartbeat_at or 0.0)
        if age > LEASE_S or owner_gone(self.owner):
            return None
        return f"process {self.owner} ({self.holder}), whose last heartbeat was {age:.0f} s ago"


class StreamLocks:
    """The lock table of a ledger's database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def acquire(
        self, *, stream: str, reconfiguration_id: str, plan_hash: str, holder: str, owner: str | None = None
    ) -> StreamLock:
        """Take the stream for ``reconfiguration_id`` (the lease too, for ``owner``: default :func:`this_process`);
        return the lock that holds it afterwards.

        The caller owns the stream only if the returned lock names its reconfiguration.
        """
        now = time.time()
        wanted = StreamLock(stream, reconfiguration_id, plan_hash, holder, now, owner or this_process(), now)
        try:
            with self.engine.begin() as connection:
                connection.execute(LOCKS.insert().values(asdict(wanted)))
        except IntegrityError:
            pass  # held already (by this reconfiguration, or another one)
        lock = self.get(stream)
        if lock is None:  # released between our insert and read: try again
            return self.acquire(
                stream=stream, reconfiguration_id=reconfiguration_id, plan_hash=plan_hash, holder=holder, owner=owner
            )
        return lock

    def get(self, stream: str) -> StreamLock | None:
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(LOCKS).where(LOCKS.c.stream == stream)).first()
        return StreamLock(**row._asdict()) if row else None

    def release(self, stream: str, reconfiguration_id: str) -> bool:
        with self.engine.begin() as connection:
            result = connection.execute(
                LOCKS.delete().where(LOCKS.c.stream == stream, LOCKS.c.reconfiguration_id == reconfiguration_id)
            )
        return result.rowcount > 0

    def claim_lease(self, stream: str, reconfiguration_id: str, me: str) -> str | None:
        """Take the lease of ``reconfiguration_id``'s lock for ``me``; None when taken (or the lock is gone), else who
        holds it (see :meth:`StreamLock.lease_holder`). A compare-and-set: of two claimants, one wins."""
        lock = self.get(stream)
        if lock is None or lock.reconfiguration_id != reconfiguration_id:
            return None
        holder = lock.lease_holder(me)
        if holder is not None:
            return holder
        with self.engine.begin() as connection:
            taken = connection.execute(
                LOCKS.update()
                .where(
                    LOCKS.c.stream == stream,
                    LOCKS.c.reconfiguration_id == reconfiguration_id,
                    LOCKS.c.owner.is_not_distinct_from(lock.owner),
                    LOCKS.c.heartbeat_at.is_not_distinct_from(lock.heartbeat_at),
                )
                .values(owner=me, heartbeat_at=time.time())
            )
        return None if taken.rowcount == 1 else self.claim_lease(stream, reconfiguration_id, me)

    def heartbeat(self, stream: str, reconfiguration_id: str, me: str, *, release: bool = False) -> None:
        """Renew ``me``'s lease (``release``: give it back)."""
        values = {"owner": None, "heartbeat_at": None} if release else {"heartbeat_at": time.time()}
        with self.engine.begin() as connection:
            connection.execute(
                LOCKS.update()
                .where(LOCKS.c.stream == stream, LOCKS.c.reconfiguration_id == reconfiguration_id, LOCKS.c.owner == me)
                .values(**values)
            )

    @contextmanager
    def leased(self, stream: str, reconfiguration_id: str, me: str, *, keep: bool = False) -> Iterator[None]:
        """Take the lease for ``me`` and hold it while the block runs: a heartbeat every :data:`HEARTBEAT_S`, and
        the lease given back after (``keep``: a last heartbeat instead, so it stays ``me``'s for :data:`LEASE_S`
        more: a run whose steps are separate processes keeps the stream between them).

        Raises:
            ReconfigurationRefused: another process holds it (nothing ran).
        """
        held = self.claim_lease(stream, reconfiguration_id, me)
        if held is not None:
            raise ReconfigurationRefused(
                stream,
                [
                    f"reconfiguration {reconfiguration_id} of stream {stream!r} is running its steps in {held}; wait "
                    f"for it to finish (a crashed one is taken over after {LEASE_S:.0f} s without a heartbeat)"
                ],
            )
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                try:
                    self.heartbeat(stream, reconfiguration_id, me)
                except sa.exc.SQLAlchemyError:
                    pass  # a busy database: the next beat, well within the lease

        thread = threading.Thread(target=beat, name=f"lease-{stream}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.heartbeat(stream, reconfiguration_id, me, release=not keep)
