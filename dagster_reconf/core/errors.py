"""Error types of dagster-reconf.

Every error raised at a boundary (stream specs, source options, control requests,
cluster and supervisor operations) is a :class:`ReconfError` subclass whose message
names the bad value, the rule it broke and how to fix it, so a user never has to read
a stack trace to know what to change.
"""

from __future__ import annotations

__all__ = [
    "ControlRequestError",
    "ReconfError",
    "SpecError",
    "StreamNotFoundError",
    "StreamStartError",
    "StreamStateError",
]


class ReconfError(Exception):
    """Base class of every error dagster-reconf raises on purpose."""


class SpecError(ReconfError, ValueError):
    """A stream spec, source option or setting is invalid."""


class StreamNotFoundError(ReconfError, LookupError):
    """No stream of that name is known in the runtime home."""


class StreamStartError(ReconfError, RuntimeError):
    """The driver of a stream could not be started; nothing was left running."""


class StreamStateError(ReconfError, RuntimeError):
    """The stream is not in a state that allows the requested operation."""


class ControlRequestError(ReconfError):
    """The control endpoint refused a request (bad token, malformed body, bad state).

    Attributes:
        status: HTTP status code the endpoint answered with.
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
