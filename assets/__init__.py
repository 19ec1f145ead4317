"""Assets of the reference code location."""

from .scaling import SCALING as SCALING
from .scaling import ds2_plans as ds2_plans
from .scaling import stream_configuration as stream_configuration
from .stream_progress import stream_progress as stream_progress
from .traces import TRACES as TRACES
from .traces import cp_summaries as cp_summaries
from .traces import stream as stream
from .traces import trace_snapshots as trace_snapshots
