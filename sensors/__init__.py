"""Sensors of the reference code location: per bundled stream a progress observer and a scaling
sensor, and one sensor that records failed reconfiguration runs in the audit ledger."""

from assets.scaling import SCALING
from dagster_reconf.reconfiguration_assets import build_reconfiguration_failure_sensor
from dagster_reconf.scaling_sensor import build_scaling_sensor
from dagster_reconf.sensor_builder import build_stream_progress_sensor
from resources.streams import STREAM_NAMES

progress_sensors = [build_stream_progress_sensor(stream=name) for name in STREAM_NAMES]
scaling_sensors = [build_scaling_sensor(stream=name, scaling=SCALING) for name in STREAM_NAMES]
reconfiguration_failure_sensor = build_reconfiguration_failure_sensor(job=SCALING.job)
