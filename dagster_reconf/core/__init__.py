"""The core of dagster-reconf: everything that does not need Dagster.

- ``workloads/``: event generators, the ``nexmark`` and ``words`` Spark sources, the bundled queries.
- ``spec``: what a managed stream is, validated; what changing a setting costs.
- ``session``, ``runtime``, ``listener``, ``metrics``, ``sink``, ``oracle``: running one stream in a process.
- ``control``, ``driver``, ``supervisor``, ``cluster``, ``cli``: running streams as supervised processes.
"""
