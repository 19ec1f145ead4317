"""A Dagster code location for the orders stream: start it, watch it, scale it, see its critical path.

``dagster dev -w examples/orders/workspace.yaml`` loads it. Where the orders arrive and where
the totals go come from the environment (``ORDERS_INPUT``, ``ORDERS_OUTPUT``; default under
``./orders-data``), the runtime home from ``RECONF_HOME`` (default ``./.reconf``). A deployment
past one machine gives the whole spec instead (``ORDERS_SPEC_FILE``: its cluster master, storage
URL, driver host and token variable) and ``RECONF_REMOTE=1``: the driver then runs on its own
host, started there by ``reconf agent`` (see the README's "Past one machine").

* ``stream_control_job``: start the stream (``action: start``) or stop it at a batch boundary.
* ``trace_snapshots`` / ``cp_summaries``: what the stream's batches spent their time on, per 15-minute window.
* ``ds2_plans`` / ``stream_configuration``: DS2's plan, applied as a journaled reconfiguration.
* ``orders_scaling_sensor``: requests those runs when the stream falls behind (stopped by default).
"""

import json
import os
from pathlib import Path

from dagster import Definitions

from dagster_reconf import (
    AuditLedgerResource,
    StreamRuntimeResource,
    StreamSpec,
    build_reconfiguration_failure_sensor,
    build_scaling_assets,
    build_scaling_sensor,
    build_stream_control_job,
    build_trace_assets,
)

DATA = Path(os.environ.get("ORDERS_DATA", "orders-data")).resolve()

ORDERS = StreamSpec(
    name="orders",
    entrypoint="examples.orders.streams:orders",
    options={
        "input_dir": os.environ.get("ORDERS_INPUT", str(DATA / "in")),
        "output_dir": os.environ.get("ORDERS_OUTPUT", str(DATA / "out")),
        "sleep_ms_per_order": float(os.environ.get("ORDERS_SLEEP_MS", "0")),
    },
    master=os.environ.get("ORDERS_MASTER", "local[1]"),
    state_partitions=4,
    trigger_interval_s=float(os.environ.get("ORDERS_TRIGGER_S", "2")),
    max_per_trigger=int(os.environ.get("ORDERS_MAX_FILES", "6")),  # the file source's maxFilesPerTrigger
)
if os.environ.get("ORDERS_SPEC_FILE"):
    ORDERS = StreamSpec.parse(json.loads(Path(os.environ["ORDERS_SPEC_FILE"]).read_text()))

HOME = os.environ.get("RECONF_HOME", ".reconf")
POLICY = {"max_cores": int(os.environ.get("ORDERS_MAX_CORES", "8"))}
traces = build_trace_assets(streams=[ORDERS.name], window_minutes=15, policy_config=POLICY)
scaling = build_scaling_assets(streams=[ORDERS.name], policy="ds2", policy_config=POLICY)

defs = Definitions.merge(
    traces.defs,
    scaling.defs,
    Definitions(
        jobs=[build_stream_control_job([ORDERS])],
        sensors=[
            build_scaling_sensor(stream=ORDERS.name, scaling=scaling, traces=traces, minimum_interval_seconds=15),
            build_reconfiguration_failure_sensor(job=scaling.job),
        ],
        resources={
            "streams": StreamRuntimeResource(home=HOME, remote=os.environ.get("RECONF_REMOTE") == "1"),
            "audit_ledger": AuditLedgerResource(url=os.environ.get("RECONF_LEDGER_URL", ""), home=HOME),
        },
    ),
)
