"""A lease on each stream lock: the process running a step (owner) and its last heartbeat.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reconf_stream_locks") as table:
        table.add_column(sa.Column("owner", sa.String(256), nullable=True))
        table.add_column(sa.Column("heartbeat_at", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reconf_stream_locks") as table:
        table.drop_column("heartbeat_at")
        table.drop_column("owner")
