"""Preflight: everything a reconfiguration checks before it touches anything, as a list of problems.

The stream is healthy and its checkpoint consistent; it can pause at a batch boundary; the strategy can rebuild its
state; the state store is RocksDB and this Spark repartitions offline (the native path); every stateful operator is one
whose migration is verified (:mod:`~dagster_reconf.core.reconfig.operators`) and every one the plan names exists;
there is disk for the rewritten state; a stream over Kafka is planned within its topics' partitions and a replay
within their retention (:mod:`~dagster_reconf.core.reconfig.kafka_preflight`); a standalone master has room for the
executors a cores change adds; a new code version's state schema fits the checkpoint. Each problem names what is
wrong and the fix; an empty list means the plan may go ahead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_reconf.core.reconfig.capabilities import stream_capabilities
from dagster_reconf.core.reconfig.kafka_preflight import kafka_problems, repeat_bound
from dagster_reconf.core.reconfig.observe import recent_backlog
from dagster_reconf.core.reconfig.operators import operator_problems
from dagster_reconf.core.reconfig.precopy import batch_merge_problem, precopy_verdict
from dagster_reconf.core.spark.executor_room import executor_room_problem
from dagster_reconf.core.spark.session import native_repartition_available
from dagster_reconf.core.store.checkpoint import (
    CheckpointFacts,
    checkpoint_facts,
    free_bytes,
    operator_metadata,
    tree_bytes,
)
from dagster_reconf.core.store.storage import Location

if TYPE_CHECKING:
    from dagster_reconf.core.reconfig.handles import StreamHandle
    from dagster_reconf.core.reconfig.reconfiguration import Reconfiguration

__all__ = ["DISK_MARGIN_BYTES", "executor_room_problems", "migration_problems", "preflight"]

DISK_MARGIN_BYTES = 64 << 20
PACE_TAIL_BYTES = 1 << 20  # the recent batches a precopy's pace is judged on


def preflight(r: Reconfiguration, stream: StreamHandle) -> tuple[list[str], dict[str, Any]]:
    """The problems that forbid ``r`` on ``stream`` now (empty: none), and what was checked."""
    problems: list[str] = []
    checks: dict[str, Any] = {}
    status = stream.status()
    checks["state"] = status.get("state")
    connector = status.get("kafka_connector") or {}
    if connector.get("warning"):  # a pairing Spark does not promise: on the record, not a refusal
        checks["warnings"] = [connector["warning"]]
    if status.get("state") == "failed":
        problems.append(
            f"stream {r.stream!r} failed ({status.get('failure')}); fix and restart it before reconfiguring"
        )
    elif status.get("state") != "running":
        problems.append(
            f"stream {r.stream!r} is {status.get('state')}; start it (`reconf stream start {r.stream}`) "
            "before reconfiguring"
        )
    checkpoint = stream.paths.checkpoint
    facts = checkpoint_facts(checkpoint)
    checks["checkpoint"] = facts.summary()
    if status.get("state") != "running" and not facts.committed:
        problems.append(
            f"checkpoint {checkpoint} has batch {facts.last_offset_batch} planned but not committed; "
            "start the stream so it finishes that batch"
        )
    spec = stream.spec()
    record = stream.metrics().last_progress()
    progress = (record or {}).get("progress")
    capabilities = stream_capabilities(stream.definition(), record, checkpoint, accept_loss=spec.accept_loss)
    checks["capabilities"] = capabilities.as_dict()
    repeats = repeat_bound(progress, capabilities.delivery.sink if capabilities.delivery is not None else "")
    if repeats:
        checks.setdefault("warnings", []).append(repeats)
    if not capabilities.pause:
        problems.append(
            f"stream {r.stream!r} cannot stop and restart without losing data: {capabilities.reasons['pause']}"
        )
    elif capabilities.delivery is not None and capabilities.delivery.loss_accepted:
        checks["accepted_loss"] = capabilities.reasons["pause"]  # journaled with the preflight's result
    if r.needs_migration and r.strategy == "replay" and not capabilities.replay:
        problems.append(
            f"the replay strategy cannot rebuild the state of stream {r.stream!r}: "
            f"{capabilities.reasons.get('replay')}; use strategy 'native'"
        )
    if r.needs_migration and r.strategy == "precopy" and not capabilities.replay_recent:
        problems.append(
            f"the precopy strategy replays the batches of stream {r.stream!r} since its copy, but "
            f"{capabilities.reasons.get('replay')}; use strategy 'native'"
        )
    if r.needs_migration and r.strategy == "precopy" and capabilities.replay_recent:
        records, _ = stream.metrics().tail(PACE_TAIL_BYTES)
        history = recent_backlog(records, r.current.partitioning.trigger_interval_s)
        verdict = precopy_verdict(history, batch_merge_problem(checkpoint))
        checks["precopy"] = verdict
        if not verdict["runs"]:
            checks.setdefault("warnings", []).append(f"the precopy will fall back: {verdict['why']}")
    interval = r.target.partitioning.trigger_interval_s
    if spec.trigger_from == "definition" and interval != r.current.partitioning.trigger_interval_s:
        problems.append(
            f"the trigger of stream {r.stream!r} is set in its definition (processingTime "
            f"{spec.trigger_interval_s:g} s): the plan cannot change it to {interval:g} s; change it in the "
            "definition's code, or leave trigger_interval_s as it is in the plan"
        )
    problems += kafka_problems(r, stream, progress, checks)
    if r.needs_migration:
        problems += migration_problems(r, checkpoint, facts, checks)
    problems += executor_room_problems(r, stream, status.get("executors"))
    if r.target.logic.code_version != r.current.logic.code_version and status.get("state") == "running":
        check = stream.code_check(r.target.logic.code_version)
        checks["code_version"] = check
        if not check["compatible"]:
            problems.append(
                f"code version {r.target.logic.code_version!r} cannot read the checkpoint's state: "
                + "; ".join(check["problems"])
                + "; keep the state schema or start a new stream"
            )
    return problems, checks


def executor_room_problems(r: Reconfiguration, stream: StreamHandle, live: int | None) -> list[str]:
    """Whether a standalone master can place the executors a cores change adds (same executor size only: the
    executors the stream holds are reused, in place or by the next SparkContext)."""
    now, target = r.current.resources, r.target.resources
    same_shape = (now.master, now.executor_cores, now.executor_memory) == (
        target.master,
        target.executor_cores,
        target.executor_memory,
    )
    if not same_shape or not target.executor_cores or not target.max_cores or live is None:
        return []
    problem = executor_room_problem(
        target.master,
        target.max_cores // target.executor_cores - live,
        executor_cores=target.executor_cores,
        executor_memory=stream.spec().executor_memory_setting,
        home=stream.paths.home,
    )
    return [problem] if problem else []


def migration_problems(
    r: Reconfiguration, checkpoint: Location, facts: CheckpointFacts, checks: dict[str, Any]
) -> list[str]:
    """What forbids moving the state of ``checkpoint`` as ``r`` plans (``checks`` gains what was read)."""
    problems = []
    if facts.last_committed_batch is None:
        problems.append(
            f"stream {r.stream!r} has not committed a micro-batch yet, so there is no state to migrate; "
            "wait for its first batch"
        )
    found = operator_metadata(checkpoint)
    operators = {operator.operator_id: operator.name for operator in found}
    checks["operators"] = operators
    problems.extend(operator_problems(found, r.strategy))
    named = r.target.partitioning.state_partitions
    if isinstance(named, dict):
        unknown = sorted(set(named) - set(operators))
        if unknown:
            known = ", ".join(f"{k} ({v})" for k, v in operators.items()) or "none"
            problems.append(
                f"partitioning.state_partitions names unknown stateful operator(s) {unknown}; "
                f"the checkpoint has {known}"
            )
    if r.strategy in ("native", "precopy"):  # a precopy repartitions its copy the native way
        available, version = native_repartition_available()
        checks["spark"] = version
        if not available:
            problems.append(f"PySpark {version} cannot repartition state offline (needs 4.2+); use strategy 'replay'")
        if facts.provider and not facts.uses_rocksdb:
            problems.append(
                f"checkpoint {checkpoint} keeps state with {facts.provider.rsplit('.', 1)[-1]}; the native "
                "migration supports RocksDB state only: use strategy 'replay', or run the stream with "
                "RocksDB state (the default)"
            )
    state_bytes = tree_bytes(checkpoint / "state")
    free = free_bytes(checkpoint)
    checks["disk"] = {"state_bytes": state_bytes, "free_bytes": free}
    if free is not None and free < state_bytes + DISK_MARGIN_BYTES:  # None: a remote store, its quota is its own
        problems.append(
            f"{free >> 20} MiB free next to {checkpoint}, but a migration writes a copy of the state "
            f"({state_bytes >> 20} MiB) plus {DISK_MARGIN_BYTES >> 20} MiB: free some disk"
        )
    return problems
