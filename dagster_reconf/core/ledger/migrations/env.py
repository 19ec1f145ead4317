"""Alembic environment of the audit ledger: runs on the connection, tables and version table the ledger passes in.

Alembic loads this file as a script, outside the package, so it imports nothing of ours.
"""

from alembic import context

attributes = context.config.attributes
context.configure(
    connection=attributes["connection"],
    target_metadata=attributes["metadata"],
    version_table=attributes["version_table"],
)
with context.begin_transaction():
    context.run_migrations()
