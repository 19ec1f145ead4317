"""Admission: which reconfiguration holds a stream. One at a time, whatever the plan (the ledger's lock per stream).

A new plan takes the stream's lock and journals ``reconfiguration.started``; the same plan again (a re-run after a
crash or a failed run) continues the unfinished reconfiguration that holds the lock; another plan is refused with
who holds the stream and the way out. An attached stream, a plan for another stream or one the stream's definition
cannot run are refused before anything is journaled but the refusal.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, NoReturn

from dagster_reconf.core.errors import ReconfigurationRefused, SpecError
from dagster_reconf.core.ledger import AuditLedger
from dagster_reconf.core.ledger.locks import LEASE_S, this_process
from dagster_reconf.core.reconfig.handles import StreamHandle
from dagster_reconf.core.reconfig.plan import ExecutionPlan, diff_plans
from dagster_reconf.core.reconfig.reconfiguration import Reconfiguration
from dagster_reconf.core.store.checkpoint import stateful_operators

__all__ = ["admit", "refuse"]


def admit(
    stream_handle: StreamHandle,
    ledger: AuditLedger,
    target: ExecutionPlan | dict[str, Any] | str,
    *,
    strategy: str,
    holder: str,
    owner: str | None = None,
    trigger: dict[str, Any] | None = None,
    evidence: dict[str, Any] | None = None,
) -> Reconfiguration:
    """The reconfiguration of ``stream_handle``'s stream to ``target`` that now holds the stream: a new one (noop
    where the plan changes nothing), or the unfinished one of the same plan.

    Raises:
        ReconfigurationRefused: the plan is invalid for the stream, or another plan holds the stream.
    """
    owner = owner or this_process()  # who runs the steps: the lease's owner
    stream = stream_handle.name
    if stream_handle.paths.attached.is_file():
        refuse(
            ledger,
            stream,
            [
                f"stream {stream!r} is attached: dagster-reconf reads it from its event logs at "
                f"{stream_handle.paths.event_log} and recommends plans (ds2_plans), but does not run it, "
                "so it cannot apply one; change the settings where the job is deployed"
            ],
            trigger,
        )
    try:
        plan = target if isinstance(target, ExecutionPlan) else ExecutionPlan.parse(target)
        if plan.stream != stream:
            raise SpecError(f"plan is for stream {plan.stream!r}, not {stream!r}")
    except SpecError as exc:
        refuse(ledger, stream, [str(exc)], trigger)
    lock = ledger.lock(stream)
    if lock is not None:
        if lock.plan_hash != plan.plan_hash:
            since = datetime.fromtimestamp(lock.acquired_at, timezone.utc).isoformat(timespec="seconds")
            refuse(
                ledger,
                stream,
                [
                    f"stream {stream!r} is being reconfigured by {lock.reconfiguration_id} "
                    f"(plan {lock.plan_hash}, since {since}, by {lock.holder}); re-run that plan to finish it, "
                    "or abort it with "
                    f"`reconf reconfigure abort {stream}`"
                ],
                trigger,
            )
        running = lock.lease_holder(owner)
        if running is not None:
            refuse(
                ledger,
                stream,
                [
                    f"stream {stream!r} is being reconfigured to this plan by {lock.reconfiguration_id}, whose step "
                    f"runs in {running}; wait for it to finish (a re-run continues it only once that process is gone "
                    f"or {LEASE_S:.0f} s pass without its heartbeat)"
                ],
                trigger,
            )
        reconfiguration = Reconfiguration.from_ledger(ledger, lock.reconfiguration_id)
        # The killed run's last request may still run in the driver (a migration): its step is taken up once it ends.
        waited = stream_handle.await_idle()
        ledger.append(
            stream=stream,
            kind="reconfiguration.resumed",
            reconfiguration_id=reconfiguration.id,
            payload={
                "holder": holder,
                "steps_done": list(reconfiguration.results),
                "trigger": trigger or {},
                "waited_for_driver_s": round(waited, 1),
            },
        )
        return reconfiguration
    spec = stream_handle.spec()
    current = ExecutionPlan.of(spec)
    try:
        diff = diff_plans(current, plan, spec, tuple(stateful_operators(stream_handle.paths.checkpoint)))
        stream_handle.validate(plan.apply_to(spec))  # the definition's code versions and knob mapping
    except SpecError as exc:
        refuse(ledger, stream, [str(exc)], trigger)
    reconfiguration = Reconfiguration(
        uuid.uuid4().hex[:16], stream, strategy, current, plan, diff.as_rows(), trigger or {}, evidence or {}
    )
    if diff.empty:
        reconfiguration.outcome = "noop"
        ledger.append(
            stream=stream,
            kind="reconfiguration.noop",
            reconfiguration_id=reconfiguration.id,
            payload={**reconfiguration.started_payload(), "outcome": "noop"},
        )
        return reconfiguration
    lock = ledger.acquire_lock(
        stream=stream, reconfiguration_id=reconfiguration.id, plan_hash=plan.plan_hash, holder=holder, owner=owner
    )
    if lock.reconfiguration_id != reconfiguration.id:  # another run took the stream between our check and insert
        return admit(
            stream_handle,
            ledger,
            plan,
            strategy=strategy,
            holder=holder,
            owner=owner,
            trigger=trigger,
            evidence=evidence,
        )
    ledger.append(
        stream=stream,
        kind="reconfiguration.started",
        reconfiguration_id=reconfiguration.id,
        payload={**reconfiguration.started_payload(), "holder": holder},
    )
    return reconfiguration


def refuse(ledger: AuditLedger, stream: str, problems: list[str], trigger: dict[str, Any] | None) -> NoReturn:
    """Journal a refusal before anything began, and raise it.

    Raises:
        ReconfigurationRefused: always, with ``problems``.
    """
    ledger.append(
        stream=stream, kind="reconfiguration.refused", payload={"problems": problems, "trigger": trigger or {}}
    )
    raise ReconfigurationRefused(stream, problems)
