"""Fuzzing the event-log reader with damaged copies of logs Spark itself wrote, in every codec.

A module fixture runs a short stream per codec (none, zstd, lz4, snappy) and keeps its event
log. Hypothesis then damages copies of them (bit flips, cut lines, invalid UTF-8, garbage,
truncation, damaged compressed blocks) and ingests each as a stream's trace store does. The
reader may only raise the project's own ``EventLogError`` (and only for a file that is no
event log at all), never takes more than a few seconds, and keeps at least the tasks of
the tasks of every line before the damaged byte of an uncompressed log.
"""

import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_reconf.core.traces.eventlog import EventLogError
from dagster_reconf.core.traces.store import TraceStore
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import run_to_end

pytestmark = pytest.mark.spark

CODECS = [None, "zstd", "lz4", "snappy"]
SECONDS_PER_READ = 5.0


@pytest.fixture(name="spark_logs", scope="module")
def spark_logs_fixture(tmp_path_factory) -> dict[str | None, Path]:
    """One finished single-file event log per codec, from a few batches of Nexmark Q5."""
    home = tmp_path_factory.mktemp("logs")
    logs = {}
    for codec in CODECS:
        conf = {"spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": str(codec is not None).lower()}
        if codec:
            conf["spark.eventLog.compression.codec"] = codec
        spec = bundled_spec(
            f"log-{codec or 'plain'}",
            "q5",
            rate=1_000_000,
            max_events=4000,
            max_per_trigger=1000,
            trigger_interval_s=0.1,
            state_partitions=2,
            spark_conf=conf,
        )
        logs[codec] = run_to_end(home, spec)
    return logs


def ingest(directory: Path, store_dir: Path) -> tuple[object, float]:
    started = time.monotonic()
    report = TraceStore(store_dir).ingest(directory)
    return report, time.monotonic() - started


def test_every_codec_reads_cleanly_first(spark_logs, tmp_path):
    for codec, log in spark_logs.items():
        report, _ = ingest(log.parent, tmp_path / f"store-{codec}")
        assert report.activities > 0 and not any("damaged" in r or "corrupt" in r for r in report.skipped), (
            codec,
            report,
        )


DAMAGE = st.sampled_from(["flip", "cut_line", "utf8", "garbage", "truncate", "zero_run"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    codec=st.sampled_from(CODECS),
    damage=DAMAGE,
    where=st.floats(0.0, 1.0),
    size=st.integers(1, 64),
    seed=st.integers(0, 2**16),
)
def test_damaged_copies_never_crash_the_reader(spark_logs, tmp_path_factory, codec, damage, where, size, seed):
    source = spark_logs[codec]
    original = source.read_bytes()
    data = bytearray(original)
    at = min(len(data) - 1, int(where * len(data)))
    if damage == "flip":
        for k in range(size):
            data[(at + k * 97 + seed) % len(data)] ^= 1 << ((seed + k) % 8)
    elif damage == "cut_line" and codec is None:
        end = data.find(b"\n", at)
        if end > at:
            del data[at:end]
    elif damage == "utf8":
        data[at:at] = b"\xff\xfe\xc3\x28" * max(1, size // 4)
    elif damage == "garbage":
        data[at:at] = b"\n" + bytes((seed * 31 + k) % 256 for k in range(size)) + b"\n"
    elif damage == "truncate":
        del data[at:]
    else:
        data[at : at + size] = bytes(size)
    directory = tmp_path_factory.mktemp("damaged")
    (directory / source.name).write_bytes(bytes(data))
    try:
        report, seconds = ingest(directory, directory / "traces")
    except EventLogError as error:  # only for a file that is not a log at all: its head is gone
        assert "is not a Spark event log" in str(error) or "not Spark's" in str(error) or "no zstd frame" in str(error)
        return
    assert seconds < SECONDS_PER_READ, f"{codec}/{damage}: {seconds:.1f} s"
    if codec is None and damage in ("cut_line", "garbage", "utf8", "truncate", "zero_run") and damage != "flip":
        # Every line before the damaged byte is intact: all of its tasks are kept.
        intact = directory / "intact"
        intact.mkdir()
        (intact / source.name).write_bytes(original[: original.rfind(b"\n", 0, at) + 1])
        before, _ = ingest(intact, directory / "intact-traces")
        kept = TraceStore(directory / "traces").activities(0, float("inf"))
        expected = TraceStore(directory / "intact-traces").activities(0, float("inf"))
        task_ids = lambda table: set(table.loc[table["src_worker"].isna(), "task_id"])  # noqa: E731
        assert task_ids(kept) >= task_ids(expected), (damage, report.skipped, before.skipped)


def test_a_non_log_file_in_the_log_directory_is_reported_and_the_logs_read(spark_logs, tmp_path):
    directory = tmp_path / "eventlog"
    directory.mkdir()
    shutil.copy(spark_logs[None], directory / spark_logs[None].name)
    (directory / "app-20261123-notes").write_text("the on-call notes, not an event log\n")
    report, _ = ingest(directory, tmp_path / "traces")
    assert report.activities > 0 and report.skipped["not an event log: app-20261123-notes"] == 1
