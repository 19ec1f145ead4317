"""A control plane's copy of a driver's metrics store, pulled over a real control endpoint on loopback."""

import pytest

from dagster_reconf.core.process.control import ControlClient, MetricsRequest
from dagster_reconf.core.process.control_server import ControlServer
from dagster_reconf.core.process.metrics_mirror import metrics_since, pull_metrics
from dagster_reconf.core.store.metrics import MetricsStore

TOKEN = "mirror-token"


def progress(batch_id: int) -> dict:
    return {"kind": "progress", "stream": "far", "progress": {"batchId": batch_id}}


@pytest.fixture(name="driver")
def driver_fixture(tmp_path):
    """A driver's metrics store behind a control endpoint serving ``POST /v1/metrics`` as the driver does."""
    holder = {"store": MetricsStore(tmp_path / "driver-host" / "metrics.jsonl")}
    server = ControlServer(
        TOKEN,
        {
            ("POST", "/v1/metrics"): (
                MetricsRequest,
                lambda r: metrics_since(holder["store"], r.cursor, r.max_bytes, r.source),
            )
        },
    )
    server.start()
    yield holder, ControlClient(server.port, TOKEN)
    server.close()


def batches(store: MetricsStore) -> list[int]:
    return [r["progress"]["batchId"] for r in store.progress()]


def test_each_pull_copies_only_what_is_new_and_keeps_the_drivers_times(driver, tmp_path):
    holder, client = driver
    mirror, cursor = MetricsStore(tmp_path / "plane" / "metrics.jsonl"), tmp_path / "plane" / "metrics-cursor.json"
    for k in range(3):
        holder["store"].append(progress(k))
    first = pull_metrics(client, mirror, cursor)
    assert (first.records, first.skipped) == (3, False)
    holder["store"].append(progress(3))
    assert pull_metrics(client, mirror, cursor).records == 1
    assert pull_metrics(client, mirror, cursor).records == 0
    assert batches(mirror) == [0, 1, 2, 3]
    copied = [r["recorded_at"] for r in mirror.read()[0]]
    assert copied == [r["recorded_at"] for r in holder["store"].read()[0]]


def test_a_pull_far_behind_reads_the_recent_past_and_says_it_skipped(driver, tmp_path):
    holder, client = driver
    mirror, cursor = MetricsStore(tmp_path / "plane" / "m.jsonl"), tmp_path / "plane" / "c.json"
    pull_metrics(client, mirror, cursor)
    for k in range(200):
        holder["store"].append(progress(k))
    pulled = pull_metrics(client, mirror, cursor, max_bytes=2048)
    assert pulled.skipped and 0 < pulled.records < 200
    assert batches(mirror)[-1] == 199  # the newest records are the ones kept


@pytest.mark.parametrize("new_records", [1, 40])  # a new store shorter than the cursor, and one longer
def test_a_driver_with_another_store_is_read_again_from_its_tail(driver, tmp_path, new_records):
    holder, client = driver
    mirror, cursor = MetricsStore(tmp_path / "plane" / "m.jsonl"), tmp_path / "plane" / "c.json"
    for k in range(5):
        holder["store"].append(progress(k))
    pull_metrics(client, mirror, cursor)
    holder["store"] = MetricsStore(tmp_path / "new-driver-host" / "metrics.jsonl")  # a driver on a fresh host
    for k in range(5, 5 + new_records):
        holder["store"].append(progress(k))
    pulled = pull_metrics(client, mirror, cursor)
    assert (pulled.records, pulled.skipped) == (new_records, True)
    assert batches(mirror) == list(range(5 + new_records))
