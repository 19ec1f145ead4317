"""The reference code location: bundled streams wired to the dagster-reconf plugin.

Loaded by ``workspace.yaml`` (``dagster dev -w workspace.yaml``); ``DAGSTER_RECONF_ENV``
selects the resource set (see ``resources/``).
"""

from dagster import Definitions

from assets import (
    SCALING,
    TRACES,
    cp_summaries,
    ds2_plans,
    stream,
    stream_configuration,
    stream_progress,
    trace_snapshots,
)
from dagster_reconf import build_stream_control_job, build_stream_state_asset
from resources import resources_for_env
from resources.streams import STREAM_NAMES, streams_for_env
from sensors import progress_sensors, reconfiguration_failure_sensor, scaling_sensors

defs = Definitions(
    assets=[
        stream,
        stream_progress,
        trace_snapshots,
        cp_summaries,
        ds2_plans,
        stream_configuration,
        build_stream_state_asset(streams=STREAM_NAMES),
    ],
    asset_checks=SCALING.checks,
    jobs=[TRACES.job, SCALING.job, build_stream_control_job(streams_for_env())],
    schedules=[TRACES.schedule],
    sensors=[*progress_sensors, *scaling_sensors, reconfiguration_failure_sensor],
    resources=resources_for_env(),
)
