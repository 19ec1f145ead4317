"""Sensors of the reference code location: one progress observer per bundled stream."""

from dagster_reconf.sensor_builder import build_stream_progress_sensor
from resources.streams import STREAM_NAMES

progress_sensors = [build_stream_progress_sensor(stream=name) for name in STREAM_NAMES]
