"""Resources of the reference code location, chosen per environment.

``DAGSTER_RECONF_ENV`` picks the set (default ``local``): every set has the same keys,
so assets and sensors never branch on the environment.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg
from dagster_pyspark import PySparkResource

from dagster_reconf import AuditLedgerResource, StreamRuntimeResource
from dagster_reconf.dagster.state_assets import STATE_READER_CONF

ENV_VAR = "DAGSTER_RECONF_ENV"

_LOCAL_HOME = os.environ.get("RECONF_HOME", ".reconf")
RESOURCES_LOCAL: dict[str, Any] = {
    # RECONF_HANDOVER=0: restart the SparkContext in the paused driver (the benchmarks' baseline)
    "streams": StreamRuntimeResource(home=_LOCAL_HOME, handover=os.environ.get("RECONF_HANDOVER", "1") != "0"),
    "audit_ledger": AuditLedgerResource(
        url=os.environ.get("RECONF_LEDGER_URL", ""), home=_LOCAL_HOME
    ),  # default: SQLite in the home
    "pyspark": PySparkResource(spark_config=STATE_READER_CONF),  # stream_state's batch session
}

RESOURCES_PRODUCTION: dict[str, Any] = {
    "streams": StreamRuntimeResource(home=dg.EnvVar("RECONF_HOME")),
    "audit_ledger": AuditLedgerResource(url=dg.EnvVar("RECONF_LEDGER_URL")),  # postgresql://...
    # stream_state's batch session: add the settings that reach the checkpoints (an s3a endpoint and credentials)
    "pyspark": PySparkResource(spark_config=STATE_READER_CONF),
}

RESOURCES_BY_ENV: dict[str, dict[str, Any]] = {"local": RESOURCES_LOCAL, "production": RESOURCES_PRODUCTION}


def resources_for_env(env: str | None = None) -> dict[str, Any]:
    """The resource set for ``env`` (default: ``$DAGSTER_RECONF_ENV`` or ``local``)."""
    name = env or os.environ.get(ENV_VAR, "local")
    if name not in RESOURCES_BY_ENV:
        raise ValueError(f"{ENV_VAR}={name!r} is not a known environment; use one of {sorted(RESOURCES_BY_ENV)}")
    return RESOURCES_BY_ENV[name]
