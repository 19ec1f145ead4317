"""Alembic environment of the audit ledger: runs on the connection the ledger passes in."""

from alembic import context

from dagster_reconf.core.ledger.schema import METADATA, VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
