"""Trace snapshots and CP summaries as Dagster assets, with GX checks and a schedule.

Partitions are ``stream`` (the streams this code location names, or dynamic partitions
the streams sensor registers) times ``window``: one dynamic partition per window in which
a stream ran, registered by the sensors as they read its batches
(:mod:`~dagster_reconf.dagster.trace_windows`). The window in progress is a partition too (a
partial snapshot of a live stream); the schedule requests the last closed one.
Materializing a window first ingests whatever is new in the stream's event logs
(incrementally, from the trace store's cursor), so windows can be materialized in any
order and re-materialized.

* ``stream``: the stream itself, upstream of its snapshots. Spark runs it, not Dagster: it is observed, never
  materialized, and its checks (driver alive, query healthy, lag within band) say how it is
  (:mod:`~dagster_reconf.dagster.stream_page`).
* ``trace_snapshots``: the activity table of one window (SnailTrail's snapshot), with
  a GX check of its schema and invariants.
* ``cp_summaries``: Critical Participation of that window: four summaries as tables
  and one plot in the materialization metadata, with a GX check that CP sums to 1.

Neither hands a DataFrame to an IO manager: the stream's trace store (Parquet, in the
runtime home every run already shares) holds the activities, the snapshot's metadata
names the store and the window, and ``cp_summaries`` reads the same window from it. So
nothing is pickled into Dagster's local storage, and run workers in other containers
work as long as they see the runtime home.
* a schedule that requests the latest closed window of every running stream.
"""

import base64
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import dagster as dg
import pandas as pd

from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.dagster.inline_plots import BarRow, inline_bars
from dagster_reconf.dagster.metadata_tables import figures_table, frame_table
from dagster_reconf.dagster.resources import StreamRuntimeResource
from dagster_reconf.dagster.stream_page import build_stream_asset
from dagster_reconf.dagster.trace_windows import TraceWindows
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator, asset_arguments

# The CP engine (numba, scipy), the plot (matplotlib) and GX are imported inside the asset
# bodies: loading a code location or the CLI should not pay for them.

__all__ = ["TraceAssets", "build_trace_assets"]

STREAM_DIMENSION = "stream"
WINDOW_DIMENSION = "window"
SNAPSHOT_CHECK = "schema_and_invariants"
CP_CHECK = "cp_sums_to_one"
# cp_summaries' inline plot (the page shows it in place; "plot" is the full one behind a click)
CP_GLANCE = "CP (red) and share of time (grey) by activity"
CP_COLORS = ("#d1495b", "#8d99ae")  # the full plot's colors
# Skip reasons that mean the log itself is damaged (the rest are expected in real logs).
CORRUPTION = ("corrupt_line", "not_an_event", "task with invalid launch/finish time")


@dataclass(frozen=True)
class TraceAssets:
    """What :func:`build_trace_assets` builds, to pass to ``Definitions``."""

    stream: dg.AssetsDefinition  # the stream itself: Spark runs it, the sensors observe it (see stream_page)
    snapshots: dg.AssetsDefinition
    summaries: dg.AssetsDefinition
    job: Any  # what define_asset_job returns; its class is not part of Dagster's public API
    schedule: dg.ScheduleDefinition
    partitions_def: dg.MultiPartitionsDefinition
    windows: TraceWindows  # the window dimension: registered by the sensors, one per window in which a stream ran

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        """The three assets, for ``Definitions(assets=[*traces.assets, ...])``."""
        return [self.stream, self.snapshots, self.summaries]

    @property
    def defs(self) -> dg.Definitions:
        """The assets, their job and schedule as ``Definitions``, to merge with ``dg.Definitions.merge``."""
        return dg.Definitions(assets=self.assets, jobs=[self.job], schedules=[self.schedule])

    @property
    def streams_def(self) -> dg.PartitionsDefinition:
        """The stream dimension (static names, or dynamic partitions)."""
        return self.partitions_def.get_partitions_def_for_dimension(STREAM_DIMENSION)


def _window_ms(context: dg.AssetExecutionContext, windows: TraceWindows) -> tuple[str, float, float]:
    keys = context.partition_key.keys_by_dimension
    return keys[STREAM_DIMENSION], *windows.bounds_ms(keys[WINDOW_DIMENSION])


def _fresh_per_window(spec: dg.AssetSpec, minutes: int) -> dg.AssetSpec:
    """``spec`` with a freshness policy that follows the windows, where the translator set none: each window is
    snapshotted within the next (the schedule asks at its end), so one window without a snapshot warns and two fail."""
    if spec.freshness_policy is not None:
        return spec
    window = timedelta(minutes=minutes)
    slack = timedelta(minutes=5)  # a run's start and the event log's flush
    return spec.replace_attributes(
        freshness_policy=dg.FreshnessPolicy.time_window(fail_window=3 * window + slack, warn_window=2 * window + slack)
    )


def _summary_table(frame: pd.DataFrame, limit: int = 12) -> dg.TableMetadataValue:
    """A CP summary's top ``limit`` rows as a typed table (shares to three digits)."""
    return frame_table(frame.head(limit))


def _window_metadata(lo: float, hi: float) -> dict[str, dg.MetadataValue]:
    """The window's bounds as timestamps (the UI shows them in the reader's time zone)."""
    return {
        "window_start": dg.MetadataValue.timestamp(lo / 1000.0),
        "window_end": dg.MetadataValue.timestamp(hi / 1000.0),
    }


def build_trace_assets(
    *,
    streams: Sequence[str] | None = None,
    window_minutes: int = 60,
    group_name: str | None = None,
    schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    translator: ReconfTranslator | None = None,
    policy_config: PolicyConfig | dict[str, Any] | None = None,
) -> TraceAssets:
    """The stream, trace snapshot and CP summary assets.

    Args:
        streams: stream names (static ``stream`` partitions); None (default): dynamic
            partitions, registered by the streams sensor as streams appear in the runtime home.
        window_minutes: window length in minutes (1-60, dividing the hour); a stream that runs all year adds
            ``525_600 / window_minutes`` windows (keep it far under Dagster's 100,000 partitions per asset).
        group_name: asset group of the snapshots and summaries in the UI (default: their specs', the translator's).
        schedule_status: the schedule's default status (STOPPED: start it where wanted).
        translator: names keys, groups, the job and the schedule (default: the plain names).
        policy_config: the band the stream's ``lag_within_band`` check judges against when the stream is observed from
            the UI (give the scaling assets' settings; the sensors judge with their own policy).

    Returns:
        TraceAssets: assets, the job over them, and the latest-windows schedule. They
        need a ``streams`` resource (:class:`StreamRuntimeResource`).
    """
    translator = translator or ReconfTranslator()
    stream_partitions = translator.stream_partitions(streams)
    windows = TraceWindows.of(translator.name("trace_windows"), window_minutes)
    partitions = dg.MultiPartitionsDefinition(
        {STREAM_DIMENSION: stream_partitions, WINDOW_DIMENSION: windows.partitions_def}
    )
    with warnings.catch_warnings():  # beta in Dagster 1.13, and the documented way to depend on one dimension
        warnings.simplefilter("ignore", dg.BetaWarning)
        per_stream = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=STREAM_DIMENSION)
    stream_asset = build_stream_asset(
        translator.get_asset_spec(AssetKind.STREAM).replace_attributes(partitions_def=stream_partitions),
        DS2Policy(PolicyConfig.parse(policy_config)),
        translator.node_name(AssetKind.STREAM),
    )
    snapshots_spec, summaries_spec = (
        _fresh_per_window(translator.get_asset_spec(AssetKind.TRACE_SNAPSHOTS), window_minutes),
        _fresh_per_window(translator.get_asset_spec(AssetKind.CP_SUMMARIES), window_minutes),
    )
    snapshots_key, summaries_key = snapshots_spec.key, summaries_spec.key

    @dg.asset(
        **asset_arguments(
            snapshots_spec,
            group_name=group_name,
            partitions_def=partitions,
            deps=[dg.AssetDep(stream_asset, partition_mapping=per_stream)],
            check_specs=[
                dg.AssetCheckSpec(
                    SNAPSHOT_CHECK,
                    asset=snapshots_key,
                    description="GX: schema, end >= start, known activity types, counts >= 0",
                )
            ],
        )
    )
    def trace_snapshots(context: dg.AssetExecutionContext, streams: StreamRuntimeResource):
        """Activities of one stream in one time window, from its Spark event logs (SnailTrail's snapshot)."""
        from dagster_reconf.core.traces.validation import validate_activities

        stream, lo, hi = _window_ms(context, windows)
        store = streams.trace_store(stream)
        report = store.ingest(streams.event_log_dir(stream))
        activities = store.activities(lo, hi, query_ids=streams.query_ids(stream))  # only this stream's query
        context.log.info(
            f"{stream}: ingested {report.events} events ({report.activities} activities); window has {len(activities)}"
        )
        timeline = activities[activities["src_worker"].isna()] if len(activities) else activities
        yield dg.MaterializeResult(
            metadata={
                "trace_store": dg.MetadataValue.path(str(store.root)),
                **_window_metadata(lo, hi),
                "activities": len(activities),
                "tasks": int(timeline[["task_id", "attempt"]].drop_duplicates().shape[0]) if len(timeline) else 0,
                "batches": sorted(int(b) for b in activities["batch_id"].unique() if b >= 0) if len(activities) else [],
                "workers": int(timeline["worker"].nunique()) if len(timeline) else 0,
                "ingested_events": report.events,
                "skipped": figures_table(dict(report.total_skipped), unit="events"),
            },
        )
        outcome = validate_activities(activities)
        corruption = [
            f"{count} {reason} in {stream}'s event log"
            for reason, count in report.total_skipped.items()
            if reason in CORRUPTION
        ]
        failures = outcome.failures + corruption
        yield dg.AssetCheckResult(
            check_name=SNAPSHOT_CHECK,
            passed=not failures,
            severity=dg.AssetCheckSeverity.ERROR,
            description=outcome.describe()
            if not corruption
            else "; ".join(corruption) + f" (GX: {outcome.describe()})",
            metadata={"expectations": outcome.evaluated, "failures": dg.MetadataValue.json(failures)},
        )

    @dg.asset(
        **asset_arguments(
            summaries_spec,
            group_name=group_name,
            partitions_def=partitions,
            deps=[dg.AssetDep(trace_snapshots)],  # the same partition: the window's snapshot, from the trace store
            check_specs=[
                dg.AssetCheckSpec(
                    CP_CHECK,
                    asset=summaries_key,
                    description="GX: CP over the snapshot sums to 1, each value in [0, 1]",
                )
            ],
        )
    )
    def cp_summaries(context: dg.AssetExecutionContext, streams: StreamRuntimeResource):
        """Critical Participation of the window: by activity type, worker, operator and channel, beside time shares."""
        from dagster_reconf.core.traces.critical_path import snapshot
        from dagster_reconf.core.traces.plots import cp_plot_png
        from dagster_reconf.core.traces.summaries import summarize
        from dagster_reconf.core.traces.validation import validate_cp_sum

        stream, lo, hi = _window_ms(context, windows)
        trace_snapshots = streams.trace_store(stream).activities(lo, hi, query_ids=streams.query_ids(stream))
        if trace_snapshots.empty:
            yield dg.MaterializeResult(
                metadata={"activities": 0, "note": "no activity in this window (stream idle or not running)"}
            )
            yield dg.AssetCheckResult(
                check_name=CP_CHECK, passed=True, description="no activity in the window: nothing to sum"
            )
            return
        # Only the traced part of the window is the stream's: the window in progress ends now, and a
        # stream started (or stopped) inside a window has no driver before (after) that. Counting
        # that time would hand most of the CP to an idle "unknown" driver.
        lo, hi = max(lo, float(trace_snapshots["start_ms"].min())), min(hi, float(trace_snapshots["end_ms"].max()))
        _, result = snapshot(trace_snapshots, lo, hi)
        summaries = summarize(trace_snapshots, result)
        png = base64.b64encode(
            cp_plot_png(summaries, f"{stream} {context.partition_key.keys_by_dimension[WINDOW_DIMENSION]}")
        ).decode()
        top_worker = summaries["by_worker"].iloc[0]
        top_operator = summaries["by_operator"].iloc[0]
        by_activity = summaries["by_activity_type"]
        glance = inline_bars(
            "critical participation and share of time by activity",
            [BarRow(str(r.activity), (float(r.cp), float(r.time_share))) for r in by_activity.itertuples()],
            CP_COLORS,
            scale=1.0,
        )
        yield dg.MaterializeResult(
            metadata={
                **({CP_GLANCE: glance} if glance else {}),
                "activities": len(trace_snapshots),
                "plot": dg.MetadataValue.md(f"![critical participation](data:image/png;base64,{png})"),
                "by_activity_type": _summary_table(summaries["by_activity_type"]),
                "by_worker": _summary_table(summaries["by_worker"]),
                "by_operator": _summary_table(summaries["by_operator"]),
                "by_channel": _summary_table(summaries["by_channel"]),
                "cp_sum": float(result.cp_sum),
                "traced_seconds": round((hi - lo) / 1000.0, 3),
                "log10_paths": float(result.log_paths / 2.302585092994046),
                "top_worker": _cp_line(top_worker, "worker"),
                "top_operator": _cp_line(top_operator, "operator"),
            },
        )
        outcome = validate_cp_sum(summaries["by_activity_type"])
        yield dg.AssetCheckResult(
            check_name=CP_CHECK,
            passed=outcome.success,
            description=outcome.describe(),
            metadata={"cp_sum": float(result.cp_sum)},
        )

    job = dg.define_asset_job(translator.name("trace_snapshot_job"), selection=[trace_snapshots, cp_summaries])

    @dg.schedule(
        job=job,
        cron_schedule=windows.cron,
        default_status=schedule_status,
        execution_timezone="UTC",
        name=translator.name("latest_trace_windows_schedule"),
    )
    def latest_windows(context: dg.ScheduleEvaluationContext, streams: StreamRuntimeResource):
        """Materialize the latest closed window of every stream whose driver runs (or that is attached)."""
        live = {row["name"] for row in streams.supervisor().list() if row["driver"] in ("running", "attached")}
        stream_names = stream_partitions.get_partition_keys(dynamic_partitions_store=context.instance)
        targets = [name for name in stream_names if name in live]
        if not targets:
            return dg.SkipReason(f"none of the streams {stream_names} has a running driver or is attached")
        window = windows.key(context.scheduled_execution_time.timestamp() - windows.minutes * 60)
        if not context.instance.has_dynamic_partition(windows.name, window):
            return dg.SkipReason(
                f"window {window} is not a partition of {windows.name!r}: no sensor saw a batch in it (the streams "
                "sensor registers the windows in which a stream runs; start it)"
            )
        return [
            dg.RunRequest(
                run_key=f"{name}|{window}",
                partition_key=dg.MultiPartitionKey({STREAM_DIMENSION: name, WINDOW_DIMENSION: window}),
            )
            for name in targets
        ]

    return TraceAssets(stream_asset, trace_snapshots, cp_summaries, job, latest_windows, partitions, windows)


def _cp_line(top: dict[str, Any], key: str) -> str:
    """``<name> (CP <share>, time <share>)`` of a summary's top row."""
    return f"{top[key]} (CP {top['cp']:.2f}, time {top['time_share']:.2f})"
