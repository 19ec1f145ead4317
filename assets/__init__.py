"""Assets of the reference code location."""

from .stream_progress import stream_progress as stream_progress
