"""The Dagster building blocks over the core: resources, asset and sensor factories, the reconfiguration ops.

* ``resources``: :class:`StreamRuntimeResource`, :class:`AuditLedgerResource`.
* ``translator``: the names of everything built here (``AssetKind``, ``get_asset_spec``), so two sets of streams
  share a code location; ``constants``: the run tags and statuses.
* ``trace_assets``: trace snapshots and CP summaries (``build_trace_assets``).
* ``scaling_assets``: DS2 plans and the stream configuration that applies them (``build_scaling_assets``).
* ``reconfiguration_assets``: the reconfiguration's steps as ops of a graph-backed asset; the run-failure sensor.
* ``run_config``: the typed run config of plans and strategies.
* ``stream_jobs``: a job that starts and stops the streams a code location declares.

Three sensors watch streams; pick by how many streams and what they should do:

* ``streams_sensor``: one light sensor over every stream of a runtime home: registers new streams, records their
  lag and throughput, requests a plan run when one leaves its band (the run plans from the traces). The default.
* ``scaling_sensor``: one sensor per stream that plans in the tick itself (reads the traces every tick) and requests
  the run with the plan in its config.
* ``progress_sensor``: one sensor per stream that only observes its progress (no runs).

Nothing here knows the bundled workloads: wire your own streams the way ``assets/``, ``sensors/`` and ``resources/``
of the reference code location wire ours. The closed loop that drives all of it lives in :mod:`dagster_reconf.harness`.
"""
