"""Sensors of the reference code location: per bundled stream a progress observer and a scaling
sensor, and one sensor that records failed reconfiguration runs in the audit ledger."""

from assets.scaling import SCALING
from assets.traces import TRACES
from dagster_reconf import build_reconfiguration_failure_sensor, build_scaling_sensor, build_stream_progress_sensor
from resources.streams import STREAM_NAMES

progress_sensors = [build_stream_progress_sensor(stream=name) for name in STREAM_NAMES]
# Stopped by default (start them in the UI or with `dagster sensor start`); `make demo` starts the Q5 one.
# A tick reads only new metrics, so a 15 s interval is cheap and lets a plan follow a backlog within a window.
scaling_sensors = [
    build_scaling_sensor(stream=name, scaling=SCALING, traces=TRACES, minimum_interval_seconds=15)
    for name in STREAM_NAMES
]
reconfiguration_failure_sensor = build_reconfiguration_failure_sensor(job=SCALING.job)
