"""Tables of the audit ledger (SQLAlchemy Core; created and upgraded by Alembic).

* ``reconf_audit_records``: the append-only, hash-chained log. Every reconfiguration
  step is journaled here before and after it runs, and every reconfiguration ends with
  one record that carries its whole story. Triggers refuse UPDATE and DELETE.
* ``reconf_stream_locks``: at most one reconfiguration per stream (the primary key is
  the stream). Mutable by design and not part of the chain; taking and releasing a lock
  is journaled in the chain. Its lease (``owner``, ``heartbeat_at``) names the process running a step right now, so
  a second run of the same plan waits for it instead of running steps beside it.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

__all__ = ["LOCKS", "METADATA", "RECORDS", "VERSION_TABLE"]

METADATA = MetaData()
VERSION_TABLE = "reconf_alembic_version"  # not "alembic_version": the ledger may share a database with Dagster

RECORDS = Table(
    "reconf_audit_records",
    METADATA,
    Column("seq", Integer, primary_key=True, autoincrement=False, comment="1, 2, 3, ... in append order"),
    Column("recorded_at", Float, nullable=False, comment="Unix time, seconds"),
    Column("stream", String(128), nullable=False, index=True),
    Column("reconfiguration_id", String(64), nullable=True, index=True),
    Column("kind", String(64), nullable=False),
    Column("step", String(32), nullable=True),
    Column("payload", Text, nullable=False, comment="canonical JSON"),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False, unique=True),
)

LOCKS = Table(
    "reconf_stream_locks",
    METADATA,
    Column("stream", String(128), primary_key=True),
    Column("reconfiguration_id", String(64), nullable=False),
    Column("plan_hash", String(64), nullable=False),
    Column("holder", String(256), nullable=False, comment="who took it: run id, user, host:pid"),
    Column("acquired_at", Float, nullable=False),
    Column("owner", String(256), nullable=True, comment="the process running a step now: host:pid:start; NULL: none"),
    Column("heartbeat_at", Float, nullable=True, comment="the owner's last heartbeat, Unix time"),
)
