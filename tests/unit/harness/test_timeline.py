from dagster_reconf.core.progress.lifecycle import Restarted, Started
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.harness.timeline import TIMELINE_COLUMNS, timeline_frame, timeline_plot_png


def progress(batch: int, start: int, end: int, latest: int, at: float) -> dict:
    return {
        "batchId": batch,
        "timestamp": f"2026-11-22T10:00:{at:06.3f}Z",
        "sources": [{"startOffset": {"index": start}, "endOffset": {"index": end}, "latestOffset": {"index": latest}}],
    }


def started(master: str) -> dict:
    spec = StreamSpec(name="s", entrypoint="my_pkg.streams:orders", master=master)
    return Started(stream="s", spec=spec.model_dump()).to_record()


def test_rates_backlog_and_cores_per_batch():
    records = [
        {**started("local[1]"), "recorded_at": 0.0},
        {"kind": "progress", "recorded_at": 10.0, "progress": progress(0, 0, 100, 200, 10.0)},
        {"kind": "progress", "recorded_at": 12.0, "progress": progress(1, 100, 300, 700, 12.0)},
        Restarted(stream="s", spec=started("local[4]")["spec"], scope="session", recorded_at=13.0).to_record(),
        {"kind": "progress", "recorded_at": 14.0, "progress": progress(2, 300, 900, 1100, 14.0)},
        {
            "kind": "progress",
            "recorded_at": 14.01,
            "progress": progress(3, 900, 900, 1110, 14.01),
        },  # a stop, 10 ms later
    ]
    frame = timeline_frame(records)
    assert list(frame.columns) == TIMELINE_COLUMNS
    assert frame["cores"].tolist() == [1, 1, 4, 4]
    assert frame["backlog_events"].tolist() == [100, 400, 200, 210]
    # Over at least 4 s: nothing before 14 s - 4 s; (1100 - 200) / 4 s; the stop 10 ms later does not spike.
    assert frame["offered_per_s"].isna().tolist() == [True, True, False, False]
    assert frame["offered_per_s"].iloc[2] == 225.0 and frame["processed_per_s"].iloc[2] == 200.0
    assert abs(frame["offered_per_s"].iloc[3] - 910 / 4.01) < 1e-3
    png = timeline_plot_png(frame, [(12.5, 13.5, "1 -> 4 cores")], "t")
    assert png.startswith(b"\x89PNG")


def test_no_batches_gives_an_empty_frame():
    assert timeline_frame([{**started("local[2]"), "recorded_at": 0.0}]).empty
