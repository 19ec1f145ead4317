"""Streams held back by their own read limits, on real Spark, each in a driver of its own started as a new user starts
it (``reconf stream start``, the definition in the user's module): each starts behind because of its cap, not its
cores. Where the ``max_per_trigger`` knob is the cap, ``reconf plan --apply`` raises it; where the cap is in the
user's code, ``reconf plan`` says ``cannot_keep_up``, naming the option and the value that would sustain the rate, and
the user raises it. Then the backlog clears, and the output equals the batch read of the input (the Kafka case,
``maxOffsetsPerTrigger``, on a real broker on 127.0.0.1). The knob's reconfiguration runs while a client without the
token stalls 32 connections to the driver's control endpoint."""

import json
import re
import threading
import time
from contextlib import contextmanager

import pytest

from dagster_reconf.cli import main as reconf
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.harness.oracle import check_output, check_output_in_process
from dagster_reconf.workloads.kafka import KafkaBroker, spark_kafka_jars
from examples.kafka_clicks.streams import ClickProducer

from ..hostile_clients import stalled_connections
from .conftest import wait_until

pytestmark = pytest.mark.spark

POLICY = ["--set", "window_batches=5", "--set", "warmup_batches=1", "--set", "stabilization_s=0"]


def cli(capsys, *args: str) -> tuple[int, str]:
    code = reconf(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def plan(capsys, home, name: str) -> dict:
    code, out = cli(capsys, "--home", str(home), "plan", name, "--json", *POLICY)
    assert code == 0, out
    return json.loads(out[out.index("{") :])


def start(capsys, supervisor: StreamSupervisor, name: str, entrypoint: str, *args: str) -> None:
    """``reconf stream start`` as a new user runs it, the definition in the user's module; then 8 batches."""
    code, out = cli(
        capsys, "--home", str(supervisor.home), "stream", "start", name, "--entrypoint", entrypoint,
        "--trigger-interval-s", "1", *args,
    )  # fmt: skip
    assert code == 0, out
    wait_until(lambda: batches(supervisor, name) >= 8, timeout_s=120, what="8 batches")


def raise_and_clear(capsys, supervisor: StreamSupervisor, name: str, reason: str, cleared_below: float) -> int:
    """What the user does with the decision: the cap in their options, raised to the value it names; then the
    backlog clears. The value."""
    needed = int(re.search(r"raise it to ([\d,]+)", reason).group(1).replace(",", ""))
    home = str(supervisor.home)
    code, out = cli(capsys, "--home", home, "stream", "restart", name, "--set", f"options.cap={needed}")
    assert code == 0, out
    wait_until(lambda: (backlog(supervisor, name) or 1e9) < cleared_below, timeout_s=120, what="the backlog cleared")
    return needed


def backlog(supervisor: StreamSupervisor, name: str) -> float | None:
    return supervisor.status(name).get("backlog_events")


def batches(supervisor: StreamSupervisor, name: str) -> int:
    return (supervisor.status(name).get("batch_id") or -1) + 1


@contextmanager
def writing_files(directory, every_s: float = 0.25, values_per_file: int = 10):
    """JSON files of consecutive values dropped into ``directory`` every ``every_s`` while the block runs."""
    directory.mkdir(parents=True, exist_ok=True)
    stop, written = threading.Event(), [0]

    def run() -> None:
        while not stop.wait(every_s):
            n = written[0]
            lines = "".join(json.dumps({"value": n * values_per_file + i}) + "\n" for i in range(values_per_file))
            (directory / f".f{n:05d}.tmp").write_text(lines)
            (directory / f".f{n:05d}.tmp").rename(directory / f"f{n:05d}.json")
            written[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield written
    finally:
        stop.set()
        thread.join()


def test_a_python_source_capped_by_the_knob_gets_the_cap_raised_by_reconf_plan_apply(supervisor, tmp_path, capsys):
    home = supervisor.home
    options = ["--option", f"start_time={time.time()}", "--option", f"output_dir={tmp_path / 'out'}"]
    start(capsys, supervisor, "rows", "tests.user_streams.capped:capped_rows", *options, "--max-per-trigger", "20")
    assert (backlog(supervisor, "rows") or 0) > 100  # 50 rows/s offered, 20 admitted a second: behind
    decided = plan(capsys, home, "rows")
    assert decided["action"] == "scale_up", decided["reason"]
    assert "the max_per_trigger knob is its cap: 20 ->" in decided["reason"]
    planned = decided["plan"]["target"]
    assert planned["trigger_interval_s"] == 1.0 and planned["max_per_trigger"] > 50, planned

    # The reconfiguration's steps and status calls get through while a client without the token stalls 32
    # connections to the driver's control endpoint.
    with stalled_connections(supervisor.driver_info("rows")["control_port"]):
        assert supervisor.status("rows")["state"] == "running"
        code, out = cli(capsys, "--home", str(home), "plan", "rows", "--apply", "--observe-s", "15", *POLICY)
    assert code == 0 and "succeeded" in out, out
    assert supervisor.status("rows")["spec"]["max_per_trigger"] >= planned["max_per_trigger"]
    wait_until(lambda: (backlog(supervisor, "rows") or 1e9) < 100, timeout_s=120, what="the backlog cleared")
    supervisor.stop("rows")
    comparison = check_output(home, "rows")
    assert comparison.expected_rows > 0 and comparison.lost == comparison.duplicated == 0, comparison


def test_a_cap_in_the_users_code_is_named_with_the_value_to_set_and_raising_it_clears(supervisor, tmp_path, capsys):
    home = supervisor.home
    options = ["--option", f"start_time={time.time()}", "--option", f"output_dir={tmp_path / 'out'}"]
    start(capsys, supervisor, "own", "tests.user_streams.capped:own_cap_rows", *options, "--option", "cap=20")
    decided = plan(capsys, home, "own")
    assert decided["action"] == "cannot_keep_up" and decided["plan"] is None, decided["reason"]
    reason = decided["reason"]
    assert "getDefaultReadLimit: ReadMaxRows) admits 20 events a batch (20 rows)" in reason, reason
    assert "the backlog cannot clear" in reason and "whatever the cores" in reason
    assert raise_and_clear(capsys, supervisor, "own", reason, cleared_below=100) > 50
    supervisor.stop("own")
    comparison = check_output(home, "own")
    assert comparison.expected_rows > 0 and comparison.lost == comparison.duplicated == 0, comparison


def test_a_users_max_files_per_trigger_is_named_and_raising_it_clears(supervisor, tmp_path, capsys):
    home, incoming = supervisor.home, tmp_path / "in"
    with writing_files(incoming):  # 4 files a second; the user's code reads 1 a batch
        start(
            capsys, supervisor, "files", "tests.user_streams.capped:own_cap_files", "--option", f"input_dir={incoming}",
            "--option", f"output_dir={tmp_path / 'out'}", "--option", "cap=1",
        )  # fmt: skip
        decided = plan(capsys, home, "files")
        reason = decided["reason"]
        assert decided["action"] == "cannot_keep_up", reason
        assert "maxFilesPerTrigger admits 10 events a batch (1 files)" in reason, reason
        assert raise_and_clear(capsys, supervisor, "files", reason, cleared_below=40) >= 4
    wait_until(lambda: backlog(supervisor, "files") == 0, timeout_s=60, what="every file read")
    supervisor.stop("files")
    comparison = check_output(home, "files")
    assert comparison.expected_rows > 0 and comparison.lost == comparison.duplicated == 0, comparison


def test_a_users_max_offsets_per_trigger_on_kafka_is_named_and_raising_it_clears(supervisor, tmp_path, capsys):
    home = supervisor.home
    with KafkaBroker(tmp_path / "kafka") as broker:
        broker.create_topic("clicks", partitions=2)
        producer = ClickProducer(broker.bootstrap_servers, "clicks")
        options = [f"bootstrap_servers={broker.bootstrap_servers}", "topic=clicks", f"output_dir={tmp_path / 'out'}"]
        with producer.keep_writing(per_second=200):  # the user's code reads 50 offsets a batch
            start(
                capsys, supervisor, "topic", "tests.user_streams.capped:own_cap_topic",
                *[arg for option in [*options, "cap=50"] for arg in ("--option", option)],
                "--set", f"spark_conf.spark.jars={spark_kafka_jars()}",
            )  # fmt: skip
            decided = plan(capsys, home, "topic")
            reason = decided["reason"]
            assert decided["action"] == "cannot_keep_up", reason
            # 50 offsets over 2 partitions: Spark rounds each partition's share, 49 or 50 a batch
            assert re.search(r"maxOffsetsPerTrigger admits (49|50) events a batch \((49|50) offsets\)", reason), reason
            assert raise_and_clear(capsys, supervisor, "topic", reason, cleared_below=400) >= 200
        wait_until(lambda: backlog(supervisor, "topic") == 0, timeout_s=60, what="every record read")
        supervisor.stop("topic")
        comparison = check_output_in_process(home, "topic")  # its JVM needs the connector's jars
        assert comparison.expected_rows > 0 and comparison.lost == comparison.duplicated == 0, comparison
