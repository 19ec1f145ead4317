"""The workloads dagster-reconf ships as examples and benchmarks: users of the public stream API.

* ``streams``: Nexmark Q1, Q2, Q3, Q5, Q8, Q11 and word count as stream definitions
  (``dagster_reconf.workloads.streams:q5``), and :func:`~dagster_reconf.workloads.streams.bundled_spec`.
* ``generator``, ``sources``, ``options``, ``pacing``: deterministic event generators as
  PySpark Python streaming sources, paced by the wall clock.
* ``queries``: the query logic, shared by the streams and their batch oracle.
* ``sink``, ``oracle``: an idempotent file sink and the correctness oracle.
* ``demo``: ``make demo``, the closed control loop on Nexmark Q5 through the Dagster daemon.

The core (``dagster_reconf.core``) imports none of this. Importing this package loads
nothing else: Spark's Python workers import ``sources`` and must stay cheap.
"""
