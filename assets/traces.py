"""Trace snapshots and CP summaries of the bundled streams, in 15-minute windows."""

from dagster_reconf import build_trace_assets
from resources.streams import STREAM_NAMES

from .scaling import POLICY_CONFIG

TRACES = build_trace_assets(streams=STREAM_NAMES, window_minutes=15, policy_config=POLICY_CONFIG)
stream = TRACES.stream  # the stream itself: observed (its page and checks), upstream of its snapshots
trace_snapshots = TRACES.snapshots
cp_summaries = TRACES.summaries
