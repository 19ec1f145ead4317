"""Audit records (append-only, hash-chained) and per-stream locks.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_APPEND_ONLY = "reconf_audit_records is append-only: records are never updated or deleted"


def upgrade() -> None:
    op.create_table(
        "reconf_audit_records",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("stream", sa.String(128), nullable=False),
        sa.Column("reconfiguration_id", sa.String(64), nullable=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("step", sa.String(32), nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
    )
    op.create_index("ix_reconf_audit_records_stream", "reconf_audit_records", ["stream"])
    op.create_index("ix_reconf_audit_records_reconfiguration_id", "reconf_audit_records", ["reconfiguration_id"])
    op.create_table(
        "reconf_stream_locks",
        sa.Column("stream", sa.String(128), primary_key=True),
        sa.Column("reconfiguration_id", sa.String(64), nullable=False),
        sa.Column("plan_hash", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
    )
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER reconf_audit_records_no_{action.lower()} BEFORE {action} ON reconf_audit_records "
                f"BEGIN SELECT RAISE(ABORT, '{_APPEND_ONLY}'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION reconf_audit_records_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{_APPEND_ONLY}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER reconf_audit_records_append_only BEFORE UPDATE OR DELETE ON reconf_audit_records "
            "FOR EACH ROW EXECUTE FUNCTION reconf_audit_records_append_only()"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS reconf_audit_records_append_only ON reconf_audit_records")
        op.execute("DROP FUNCTION IF EXISTS reconf_audit_records_append_only()")
    op.drop_table("reconf_stream_locks")
    op.drop_table("reconf_audit_records")
