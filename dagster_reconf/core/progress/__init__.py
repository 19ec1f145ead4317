"""Spark's progress JSON turned into typed rows, once: per-source events and backlog, state row counts,
and the lifecycle events of a managed stream."""
