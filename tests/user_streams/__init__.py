"""Streams written the way a user writes their own: outside dagster_reconf, against its public API only."""
