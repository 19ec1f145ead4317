"""The Dagster building blocks over the core: resources, asset and sensor factories, the reconfiguration ops.

* ``resources``: :class:`StreamRuntimeResource`, :class:`AuditLedgerResource`.
* ``trace_assets``: trace snapshots and CP summaries (``build_trace_assets``).
* ``scaling_assets``, ``scaling_sensor``: DS2 plans, the stream configuration and the sensor that acts on them.
* ``streams_sensor``: one light sensor over every stream (registration, lag and throughput, runs that plan).
* ``translator``: the names of everything built here, so two sets of streams share a code location.
* ``run_config``: the typed run config of plans and strategies.
* ``reconfiguration_assets``: the reconfiguration's steps as ops of a graph-backed asset; the run-failure sensor.
* ``sensor_builder``: a sensor that observes a stream's progress.
* ``stream_jobs``: a job that starts and stops the streams a code location declares.
* ``closed_loop``: the control loop through the real Dagster daemon, watched and reported (demos, benchmarks).

Nothing here knows the bundled workloads: wire your own streams the way ``assets/``,
``sensors/`` and ``resources/`` of the reference code location wire ours.
"""
