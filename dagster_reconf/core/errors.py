"""Error types of dagster-reconf.

Every error raised at a boundary (stream specs, source options, control requests,
cluster and supervisor operations) is a :class:`ReconfError` subclass whose message
names the bad value, the rule it broke and how to fix it, so a user never has to read
a stack trace to know what to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pydantic

M = TypeVar("M", bound="pydantic.BaseModel")

__all__ = [
    "ControlRequestError",
    "EventLogError",
    "ReconfError",
    "ReconfigurationInterrupted",
    "ReconfigurationRefused",
    "SourceAccessError",
    "SpecError",
    "StreamNotFoundError",
    "StreamStartError",
    "StreamStateError",
    "format_validation_error",
    "summary_line",
    "validated",
]


class ReconfError(Exception):
    """Base class of every error dagster-reconf raises on purpose."""


class SpecError(ReconfError, ValueError):
    """A stream spec, source option or setting is invalid."""


class SourceAccessError(ReconfError, RuntimeError):
    """The control plane could not read a stream's source (its brokers, its topic) to check what it needs."""


class EventLogError(ReconfError, ValueError):
    """The input is not a readable Spark event log."""


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
        busy: the driver answered that every connection slot is taken (503): asking again shortly is right.
        in_flight: the driver's mutating operation that is still running (a 409 that waits for it), else None.
    """

    def __init__(self, message: str, status: int = 400, *, busy: bool = False, in_flight: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.busy = busy
        self.in_flight = in_flight


def summary_line(text: str) -> str:
    """An error message in one line: where it carries a Python traceback (a ``foreachBatch`` function or a UDF that
    raised, relayed by Spark), the exception's own line; else its first line (Spark's messages run on with the plan
    and a JVM stack)."""
    lines = text.strip().splitlines()
    if not lines:
        return ""
    marker = next((k for k, line in enumerate(lines) if "Traceback (most recent call last):" in line), None)
    if marker is not None:
        raised = next((line for line in lines[marker + 1 :] if line and not line.startswith((" ", "\t"))), None)
        if raised:
            return raised.strip()
    return lines[0]


class ReconfigurationRefused(ReconfError, ValueError):
    """The plan cannot be applied now; nothing was changed. ``problems`` lists why, each with its fix, in one line
    each (a problem that quotes Spark keeps its summary line, not the JVM stack)."""

    def __init__(self, stream: str, problems: list[str]) -> None:
        self.details = list(problems)  # as given, traces and all (the ledger keeps them)
        self.problems = [summary_line(p) if "\n" in p else p for p in problems]
        super().__init__(f"reconfiguration of stream {stream!r} refused: " + "; ".join(self.problems))


class ReconfigurationInterrupted(ReconfError, RuntimeError):
    """A step failed part-way; the stream is recoverable and a re-run of the same plan finishes the job."""


def validated(model: type[M], data: Any, what: str) -> M:
    """``model`` from ``data``, or :class:`SpecError` naming each bad field, its value and what is allowed."""
    from pydantic import ValidationError  # not at import: Spark's Python workers import these errors

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(what, exc, data)) from None


def format_validation_error(what: str, exc: pydantic.ValidationError, data: Any) -> str:
    """One line per problem: the field, the given value and what is allowed."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        value: Any = data
        for part in err["loc"]:
            value = value.get(part) if isinstance(value, dict) else None
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            message += " (missing)"
        elif f"got {value!r}" not in message and f"got {value}" not in message:  # a validator's own message may
            message += f" (got {value!r})"
        lines.append(f"{loc}: {message}")
    return f"invalid {what}: " + "; ".join(lines)
