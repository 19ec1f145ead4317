"""Unplanned failures of a managed stream, on the audit record: a query that failed, a driver that died.

A reconfiguration journals what it did; what happens to a stream between reconfigurations must be on the same record,
or a ledger that shows only ``succeeded`` rows would hide a stream that died an hour later. The runtime's listener
writes a :class:`~dagster_reconf.core.progress.lifecycle.QueryTerminated` record with Spark's exception into the
stream's metrics store; the supervisor sees a driver whose record says it runs but whose process is gone. Whoever next
looks at the stream (the streams sensor each tick, a reconfiguration before its admission, ``reconf stream status``)
turns what it finds into one ledger record per incident (kinds :data:`INCIDENT_KINDS`), keyed by the query run or the
driver's pid, so looking twice records nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from dagster_reconf.core.errors import summary_line
from dagster_reconf.core.ledger import AuditLedger, AuditRecord
from dagster_reconf.core.progress.lifecycle import QueryTerminated, lifecycle_event

if TYPE_CHECKING:
    from dagster_reconf.core.reconfig.handles import StreamHandle

__all__ = [
    "INCIDENT_KINDS",
    "Incident",
    "driver_died",
    "query_failures",
    "record_incidents",
    "record_stream_incidents",
    "stream_incidents",
]

INCIDENT_KINDS = ("query_failed", "driver_died")
TRACE_CHARS = 20_000  # the whole trace of a failure, within reason, is kept in the record
TAIL_BYTES = 4 << 20  # how far back a stream's metrics store is read for failed query runs


@dataclass(frozen=True)
class Incident:
    """One unplanned failure of a stream.

    Attributes:
        stream: the stream's name.
        kind: ``query_failed`` (Spark ended the query with an exception) or ``driver_died`` (its process vanished).
        key: what makes it one incident: the query's run id, or the driver's pid.
        at: when it happened or was last seen alive (s since epoch; None: unknown).
        error: the error in one line (for a driver: what is known of its end).
        trace: the whole error as Spark gave it ("" where there is none).
    """

    stream: str
    kind: Literal["query_failed", "driver_died"]
    key: str
    at: float | None
    error: str
    trace: str = ""

    def payload(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("stream", "kind")}


def query_failures(stream: str, records: Iterable[dict[str, Any]]) -> list[Incident]:
    """The query runs that ended with an exception, from a stream's metrics-store records."""
    found = []
    for record in records:
        event = lifecycle_event(record)
        if isinstance(event, QueryTerminated) and event.exception:
            found.append(
                Incident(
                    stream=stream,
                    kind="query_failed",
                    key=event.run_id or f"recorded-{event.recorded_at}",
                    at=event.recorded_at,
                    error=summary_line(event.exception),
                    trace=event.exception[:TRACE_CHARS],
                )
            )
    return found


def driver_died(stream: str, death: dict[str, Any] | None) -> list[Incident]:
    """The incident of a driver found dead (:meth:`StreamSupervisor.driver_death`'s answer; None: none)."""
    if death is None:
        return []
    return [
        Incident(
            stream=stream,
            kind="driver_died",
            key=str(death.get("pid")),
            at=death.get("last_seen_at"),
            error=f"driver process {death.get('pid')} is gone while its record says it runs (killed, crashed or its "
            "host lost); `reconf stream start` starts it again from its checkpoint",
        )
    ]


def record_incidents(ledger: AuditLedger, incidents: list[Incident]) -> list[AuditRecord]:
    """Append the incidents the ledger does not hold yet (by stream, kind and key); the records added."""
    added: list[AuditRecord] = []
    for stream in sorted({i.stream for i in incidents}):
        known = {(r.kind, str(r.payload.get("key"))) for r in ledger.records(stream=stream, kinds=INCIDENT_KINDS)}
        for incident in incidents:
            if incident.stream == stream and (incident.kind, incident.key) not in known:
                known.add((incident.kind, incident.key))
                added.append(ledger.append(stream=stream, kind=incident.kind, payload=incident.payload()))
    return added


def stream_incidents(stream: StreamHandle) -> list[Incident]:
    """``stream``'s unplanned failures as far as it can tell: the failed query runs in the newest :data:`TAIL_BYTES`
    of its metrics store, and its driver if it died (read only: nothing is recorded)."""
    try:
        records, _ = stream.metrics().tail(TAIL_BYTES)
    except ValueError:  # a damaged store: its failures cannot be read, and whatever reads it next says why
        records = []
    return query_failures(stream.name, records) + driver_died(stream.name, stream.driver_death())


def record_stream_incidents(ledger: AuditLedger, stream: StreamHandle) -> list[AuditRecord]:
    """Put :func:`stream_incidents` the ledger has not heard of on the record; the records added."""
    return record_incidents(ledger, stream_incidents(stream))
