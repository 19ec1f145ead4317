"""The trace windows: dynamic partitions named by their start, registered where a stream ran, backfilled by range."""

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from dagster_reconf import build_trace_assets
from dagster_reconf.dagster.trace_windows import TraceWindows, batch_times
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator


def at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def test_a_window_is_named_by_its_start_and_a_key_that_starts_none_is_refused_with_the_one_that_holds_it():
    windows = TraceWindows.of("w", 15)
    assert windows.key(at("2026-12-01 10:14:59")) == "2026-12-01-10:00"
    assert windows.key(at("2026-12-01 10:15:00")) == "2026-12-01-10:15"
    assert windows.bounds_ms("2026-12-01-10:15") == (at("2026-12-01 10:15:00") * 1000, at("2026-12-01 10:30:00") * 1000)
    with pytest.raises(ValueError, match=r"'2026-12-01-10:07' does not start a 15-minute window: .*'2026-12-01-10:00'"):
        windows.bounds_ms("2026-12-01-10:07")
    with pytest.raises(ValueError, match=r"'tuesday' is not a window start YYYY-MM-DD-HH:MM"):
        windows.bounds_ms("tuesday")
    assert TraceWindows.of("w", 60).cron == "0 * * * *" and windows.cron == "*/15 * * * *"
    for bad in (0, 7, 90):
        with pytest.raises(ValueError, match=rf"window_minutes must divide 60 .*got {bad}"):
            TraceWindows.of("w", bad)


def test_batches_register_the_windows_they_ran_in_once_in_time_order_and_a_time_range_selects_them():
    windows = TraceWindows.of("trace_windows", 60)
    records = [
        {"kind": "progress", "progress": {"timestamp": "2026-12-01T11:59:58.120Z"}},
        {"kind": "lifecycle", "event": "started"},
        {"kind": "progress", "progress": {"timestamp": "2026-12-01T09:30:00.000Z"}},
        {"kind": "progress", "progress": {"timestamp": "not a time"}},
        {"kind": "progress", "progress": {}},
    ]
    assert batch_times(records) == [at("2026-12-01 11:59:58") + 0.12, at("2026-12-01 09:30:00")]
    with dg.instance_for_test() as instance:
        first = windows.registration(instance, [*batch_times(records), at("2026-12-01 12:00:03")])
        assert first == ["2026-12-01-09:00", "2026-12-01-11:00", "2026-12-01-12:00"]  # no batch at 10:00: not listed
        (request,) = windows.request(first)
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
        assert windows.registration(instance, [at("2026-12-01 12:30:00")]) == [] and windows.request([]) == []
        # A backfill's range of windows is a range of time over the windows the streams ran in.
        selected = dg.PartitionKeyRange("2026-12-01-09:00", "2026-12-01-11:00")
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            assert windows.partitions_def.get_partition_keys_in_range(selected) == [
                "2026-12-01-09:00",
                "2026-12-01-11:00",
            ]


def test_the_trace_assets_are_fresh_while_each_window_is_snapshotted_unless_the_translator_says_otherwise():
    traces = build_trace_assets(streams=["orders"], window_minutes=15)
    for asset in (traces.snapshots, traces.summaries):
        (spec,) = asset.specs
        assert spec.freshness_policy == dg.FreshnessPolicy.time_window(
            fail_window=timedelta(minutes=50), warn_window=timedelta(minutes=35)
        )
    daily = dg.FreshnessPolicy.time_window(fail_window=timedelta(days=1))

    @dataclass(frozen=True)
    class Daily(ReconfTranslator):
        def get_asset_spec(self, kind: AssetKind) -> dg.AssetSpec:
            return super().get_asset_spec(kind).replace_attributes(freshness_policy=daily)

    (spec,) = build_trace_assets(streams=["orders"], translator=Daily()).snapshots.specs
    assert spec.freshness_policy == daily
    assert traces.partitions_def.get_partitions_def_for_dimension("window") == traces.windows.partitions_def
