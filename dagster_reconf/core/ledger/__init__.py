"""The audit ledger: append-only, hash-chained reconfiguration records in a SQL database."""

from dagster_reconf.core.ledger.ledger import (
    AuditLedger,
    AuditRecord,
    ChainReport,
    LedgerError,
    StreamLock,
    default_ledger_url,
)

__all__ = ["AuditLedger", "AuditRecord", "ChainReport", "LedgerError", "StreamLock", "default_ledger_url"]
