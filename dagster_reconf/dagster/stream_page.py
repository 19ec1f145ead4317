"""The ``stream`` asset's page: typed figures each tick, and three checks that turn red when the stream does.

A stream runs in Spark, not in a Dagster run, so its page fills from the streams sensor
(:mod:`~dagster_reconf.dagster.streams_sensor`), as dagster-airlift's and dagster-fivetran's polling sensors fill the
pages of work done outside Dagster:

* an observation per tick with new batches: state, lag (events and seconds), offered and processed rates, utilization,
  cores, state partitions, trigger, the last batch and its time, the Spark UI, the delivery guarantee, the policy's
  direction. Units are in the labels; figures are rounded to what was measured;
* the checks ``driver_alive``, ``query_healthy`` and ``lag_within_band`` (:mod:`dagster_reconf.core.scaling.health`
  states their rules), evaluated by the sensor when a verdict changes and, while one fails, every
  :data:`RECHECK_S`, so a dead or falling-behind stream is red in the Catalog within one tick. Observing the asset
  from the UI reads the stream's newest records and judges them the same way.
"""

import time
import warnings
from typing import Any

import dagster as dg

from dagster_reconf.core.progress.delivery import delivery
from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide
from dagster_reconf.core.scaling.health import StreamHealth, assess
from dagster_reconf.core.scaling.policy import Decision, ScalingPolicy
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.dagster.resources import StreamRuntimeResource

__all__ = [
    "RECHECK_S",
    "STREAM_CHECKS",
    "build_stream_asset",
    "check_evaluations",
    "health_metadata",
    "page_events",
    "record_stopped",
]

STREAM_CHECKS = {
    "driver_alive": "A driver runs the stream (or its attached application's query has not ended).",
    "query_healthy": "The stream's query has not failed.",
    "lag_within_band": "The backlog is not growing past the policy's tolerance and is younger than its catch-up time.",
}
RECHECK_S = 300.0  # an unchanged failing verdict is recorded again this often
RECENT_BYTES = 1 << 20  # a check run reads this much of the metrics store's tail: a window's batches are a few KB


def health_metadata(health: StreamHealth) -> dict[str, dg.MetadataValue]:
    """What the stream's page shows for ``health``: typed, units in the labels, unknown figures left out."""
    metadata: dict[str, dg.MetadataValue] = {"state": dg.MetadataValue.text(health.state)}
    numbers = {
        "lag_events": (health.lag_events, 0),
        "lag_s": (health.lag_s, 1),
        "offered_events_per_s": (health.offered_rate, 1),
        "throughput_events_per_s": (health.processed_rate, 1),
        "utilization_pct": (None if health.utilization is None else 100 * health.utilization, 0),
    }
    for label, (value, digits) in numbers.items():
        if value is not None:
            metadata[label] = (
                dg.MetadataValue.int(int(round(value)))
                if digits == 0
                else dg.MetadataValue.float(round(float(value), digits))
            )
    for label, count in (("cores", health.cores), ("state_partitions", health.state_partitions)):
        if count is not None:
            metadata[label] = dg.MetadataValue.int(count)
    if health.trigger:
        metadata["trigger"] = dg.MetadataValue.text(health.trigger)
    if health.last_batch_id is not None:
        metadata["last_batch_id"] = dg.MetadataValue.int(health.last_batch_id)
    if health.last_batch_at is not None:
        metadata["last_batch_at"] = dg.MetadataValue.timestamp(health.last_batch_at)
    if health.spark_ui:
        metadata["spark_ui"] = dg.MetadataValue.url(health.spark_ui)
    if health.delivery:
        metadata["delivery"] = dg.MetadataValue.text(health.delivery)
    if health.decision:
        metadata["decision"] = dg.MetadataValue.text(health.decision)
        metadata["reason"] = dg.MetadataValue.text(health.reason or "")
    return metadata


def check_evaluations(asset_key: dg.AssetKey, health: StreamHealth) -> list[dg.AssetCheckEvaluation]:
    """The checks ``health`` judges, as evaluations on ``asset_key`` that name their stream.

    The checks are the asset's, not a partition's: Dagster (1.13) stores one evaluation recorded outside a run per
    check and partition, so a partitioned check could be recorded by a sensor only once. Each evaluation names its
    stream in its description and metadata."""
    return [
        dg.AssetCheckEvaluation(
            asset_key=asset_key,
            check_name=name,
            passed=verdict.passed,
            severity=dg.AssetCheckSeverity.WARN if verdict.warning else dg.AssetCheckSeverity.ERROR,
            description=f"{health.stream}: {verdict.reason}",
            metadata={"stream": dg.MetadataValue.text(health.stream), "state": dg.MetadataValue.text(health.state)},
        )
        for name, verdict in health.verdicts().items()
    ]


def record_stopped(instance: dg.DagsterInstance, key: dg.AssetKey, stream: str, config: PolicyConfig) -> None:
    """Put on the page, outside any sensor tick, that ``stream`` was stopped: what stops a stream and then the daemon
    (the closed loop, ``make demo``) leaves no tick to say so, and the page would show the last tick's running."""
    health = assess(stream, "not running", None, None, config)
    instance.report_runless_asset_event(
        dg.AssetObservation(asset_key=key, partition=stream, metadata=health_metadata(health))
    )
    for evaluation in check_evaluations(key, health):
        instance.report_runless_asset_event(evaluation)


def page_events(
    key: dg.AssetKey,
    stream: str,
    row: dict[str, Any],
    window: ConfigurationWindow | None,
    decision: Decision | None,
    policy: ScalingPolicy,
    memo: dict[str, Any],
    *,
    new_batches: bool,
    records: list[dict[str, Any]],
    query_error: str | None = None,
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    """What a sensor's tick records on the stream's page: its figures where a batch was read (or its state changed),
    its checks where a verdict changed (or one fails and :data:`RECHECK_S` passed). ``row`` is the supervisor's line
    for the stream, ``memo`` what the sensor's cursor keeps for the page (updated in place)."""
    progress = next((r for r in reversed(records) if r.get("kind") == "progress"), None)
    spec = (window.spec if window else None) or {}
    guarantee = (
        delivery(progress.get("progress"), accept_loss=bool(spec.get("accept_loss"))).guarantee if progress else None
    )
    health = assess(
        stream,
        row["driver"],
        window,
        decision,
        policy.config,
        query_error=query_error,
        spark_ui=row.get("spark_ui"),
        delivery=guarantee or memo.get("delivery"),
    )
    events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
    if new_batches or health.state != memo.get("state"):
        metadata = health_metadata(health)
        if row.get("entrypoint"):
            metadata["entrypoint"] = dg.MetadataValue.text(str(row["entrypoint"]))
        events.append(dg.AssetObservation(asset_key=key, partition=stream, metadata=metadata))
    verdicts = {name: [v.passed, v.warning] for name, v in health.verdicts().items()}
    now = time.time()
    failing = not all(v.passed for v in health.verdicts().values())
    # A failing stream says so again every RECHECK_S: another stream's passing verdict, recorded on the same
    # (the asset's) checks, never hides it for longer.
    if verdicts != memo.get("checks") or (failing and now - float(memo.get("checked_at", 0.0)) >= RECHECK_S):
        events.extend(check_evaluations(key, health))
        memo.update(checks=verdicts, checked_at=now)
    memo.update(state=health.state, delivery=health.delivery)
    return events


def build_stream_asset(spec: dg.AssetSpec, policy: ScalingPolicy, name: str) -> dg.AssetsDefinition:
    """The ``stream`` asset of ``spec`` (partitioned by stream) as an observable asset with its three checks: the
    sensors record its figures and verdicts each tick, and observing it in the UI reads them afresh; ``policy`` gives
    the band ``lag_within_band`` judges against. ``name``: the op's name."""
    partitions = spec.partitions_def
    with warnings.catch_warnings():  # observing a partitioned asset is beta in Dagster 1.12-1.13
        warnings.simplefilter("ignore", dg.BetaWarning)
        # The asset's checks, not a partition's (see check_evaluations); each result names its stream.
        checks = [
            dg.AssetCheckSpec(check, asset=spec.key, description=description)
            for check, description in STREAM_CHECKS.items()
        ]

        @dg.multi_observable_source_asset(
            specs=[spec.replace_attributes(partitions_def=None)],
            name=name,
            partitions_def=partitions,
            check_specs=checks,
        )
        def _observe(context: dg.AssetExecutionContext, streams: StreamRuntimeResource):
            health = stream_health_now(streams, context.partition_key, policy)
            yield dg.ObserveResult(
                asset_key=spec.key,
                metadata=health_metadata(health),
                check_results=[
                    dg.AssetCheckResult(
                        asset_key=spec.key,
                        check_name=check,
                        passed=verdict.passed,
                        severity=dg.AssetCheckSeverity.WARN if verdict.warning else dg.AssetCheckSeverity.ERROR,
                        description=f"{health.stream}: {verdict.reason}",
                        metadata={"stream": dg.MetadataValue.text(health.stream)},
                    )
                    for check, verdict in health.verdicts().items()
                ],
            )

    return _observe


def stream_health_now(streams: StreamRuntimeResource, stream: str, policy: ScalingPolicy) -> StreamHealth:
    """``stream``'s health from its newest metrics records and its driver, as a check run sees it."""
    row = streams.supervisor().row(stream)
    if row is None:
        raise dg.Failure(
            description=f"stream {stream!r} is not in the runtime home {streams.home_path}: "
            f"start it with `reconf stream start` or attach it with `reconf stream attach`",
            allow_retries=False,
        )
    driver = row["driver"]
    if driver not in ("running", "attached"):
        return assess(stream, driver, None, None, policy.config)
    store = streams.metrics(stream)
    records, _ = store.read(store.tail_offset(RECENT_BYTES))
    keep = policy.config.window_batches + policy.config.warmup_batches + 2
    window = ConfigurationWindow().update(records, keep=keep)
    if window.spec is None and driver == "running":
        window = ConfigurationWindow(spec=streams.status(stream).get("spec"), epoch="before-recent-metrics").update(
            [], keep=keep
        )
    decision = decide(policy, window, time.time(), plan=False)
    return assess(stream, driver, window, decision, policy.config, spark_ui=row.get("spark_ui"))
