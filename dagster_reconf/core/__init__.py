"""The core of dagster-reconf: everything that does not need Dagster.

- ``errors``, ``definition``, ``spec``: every error type; the user's stream API; what a managed stream is.
- ``store/``: a stream's files (paths, storage URLs, atomic writes, metrics store, checkpoint facts).
- ``progress/``: Spark's progress JSON as typed rows (per-source events and backlog, lifecycle events).
- ``spark/``: what runs inside a driver (runtime, session, listener, executors, state migrator and reader).
- ``process/``: what starts and talks to drivers (driver main, control endpoint, supervisor, local cluster).
- ``traces/``: event logs, activities, critical path (SnailTrail's CP), attached streams.
- ``scaling/``: evidence, profile, DS2's model, the policy and its plans.
- ``reconfig/``: execution plans, their diff, and the steps that carry one out.
- ``ledger/``: the audit ledger.
"""
