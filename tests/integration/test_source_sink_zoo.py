"""A source and sink zoo on real Spark: one small stateful stream per source kind Spark ships, into the sinks that
matter, each through a native state migration and a cores change while it runs. Every case either finishes with
nothing lost and nothing duplicated (the output's ids against the input's) and starts again afterwards, or is refused
at preflight with its reason and left running untouched.

Each case's runtime owns its SparkSession (a cores change on ``local[N]`` needs a new SparkContext); the JVM is shared.
Kafka's case is ``test_kafka.py`` (its broker).
"""

import json
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.paths import StreamPaths

from .conftest import wait_until

pytestmark = pytest.mark.spark

FILE_SOURCES = ("json", "parquet", "text")
ALLOWED = [
    ("json", "file"),
    ("json", "foreachBatch"),
    ("parquet", "file"),
    ("text", "foreachBatch"),
    ("rate", "file"),
    ("rate-micro-batch", "foreachBatch"),
    ("python", "file"),
    ("python", "foreachBatch"),
    ("rate", "console"),
]
REFUSED = [
    ("socket", "file", False, "socket source cannot restart from a checkpoint"),
    ("socket", "file", True, "socket source cannot restart from a checkpoint"),  # accept_loss cannot help
    ("memory", "file", False, "memory source cannot restart from a checkpoint"),
    ("rate", "memory", False, "memory sink, which cannot restart from a checkpoint"),
]


def committed(runtime: StreamRuntime) -> int:
    batch = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    return -1 if batch is None else batch


class Files:
    """Files of ids in one format dropped into a directory, 10 ids a file."""

    def __init__(self, directory: Path, fmt: str) -> None:
        self.directory, self.format, self.written = directory, fmt, 0
        directory.mkdir(parents=True)

    def write(self, files: int) -> None:
        for _ in range(files):
            ids = list(range(self.written, self.written + 10))
            path = self.directory / f"ids-{self.written:06d}.{self.format}"
            temporary = self.directory / f".{path.name}.tmp"  # hidden: Spark lists only whole files, at any moment
            if self.format == "parquet":
                pd.DataFrame({"id": ids}).to_parquet(temporary, index=False)
            elif self.format == "json":
                temporary.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
            else:
                temporary.write_text("".join(f"{i}\n" for i in ids))
            temporary.rename(path)
            self.written += 10


@contextmanager
def line_server():
    """A loopback server that sends one id a line, 20 a second, to whoever connects (bounded: 60 s)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        deadline, sent = time.monotonic() + 60, 0
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                while not stop.is_set() and time.monotonic() < deadline:
                    try:
                        conn.sendall(f"{sent}\n".encode())
                    except OSError:
                        break
                    sent += 1
                    time.sleep(0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def start(tmp_path, source: str, sink: str, accept_loss: bool = False, **options) -> StreamRuntime:
    spec = StreamSpec(
        name=f"zoo_{source}_{sink}".lower().replace("-", "_"),  # the memory sink names a view after it
        entrypoint="tests.user_streams.zoo:zoo",
        options={"source": source, "sink": sink, "output_dir": str(tmp_path / "out"), **options},
        master="local[1]",
        state_partitions=2,
        trigger_interval_s=0.5,
        accept_loss=accept_loss,
        spark_conf={"spark.ui.enabled": "false"},
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", spec.name))  # it owns its session
    runtime.start()
    # Committed, and its progress recorded: preflight reads the stream's sources from that record, which the listener
    # appends just after the commit (on a busy machine a reconfiguration could start in between and be refused).
    wait_until(
        lambda: committed(runtime) >= 0 and runtime.store.last_progress() is not None,
        timeout_s=120,
        what=f"{spec.name}: a first batch, recorded",
    )
    return runtime


def reconfigure(runtime: StreamRuntime, **changes):
    plan = ExecutionPlan.of_changes(runtime.spec, changes)
    ledger = AuditLedger(default_ledger_url(runtime.paths.home))
    return Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=20).run(plan, trigger={"kind": "zoo"})


def output_ids(runtime: StreamRuntime, directory: Path) -> list[int]:
    if not directory.exists():
        return []
    return [row.id for row in runtime.spark.read.json(str(directory)).select("id").collect()]


def keep_running(runtime: StreamRuntime, files: Files | None) -> None:
    """More input through the reconfigured query: two more files, or two more batches."""
    if files:
        files.write(2)
        runtime.query.processAllAvailable()
    else:
        resumed = committed(runtime)
        wait_until(lambda: committed(runtime) >= resumed + 2, timeout_s=60, what="two batches after the resume")


@pytest.mark.parametrize(("source", "sink"), ALLOWED, ids=[f"{a}-{b}" for a, b in ALLOWED])
def test_a_migration_and_a_cores_change_keep_every_row_once(tmp_path, source, sink):
    files = Files(tmp_path / "in", source) if source in FILE_SOURCES else None
    if files:
        files.write(3)
    runtime = start(tmp_path, source, sink, **({"input_dir": str(files.directory)} if files else {}))
    try:
        downtime = {}
        for change, settings in (("native 2->3", {"state_partitions": 3}), ("cores 1->2", {"master": "local[2]"})):
            if files:
                files.write(2)
            result = reconfigure(runtime, **settings)
            assert result.outcome == "succeeded", (change, result.outcome, result.reason)
            assert result.verification.ok, change
            downtime[change] = (result.observation.pause_s, result.observation.downtime_s)
            keep_running(runtime, files)
        assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 3
        assert runtime.spark.sparkContext.master == "local[2]"
        runtime.stop_at_batch_boundary()
        assert runtime.query.exception() is None
        runtime.start()  # it starts again
        runtime.stop_at_batch_boundary()
        if sink == "console":
            row = {"lost": "n/a", "duplicated": "n/a"}
        else:
            got = output_ids(runtime, tmp_path / "out")
            expected = set(range(files.written)) if files else set(range(max(got) + 1))
            lost, duplicated = len(expected - set(got)), len(got) - len(set(got))
            assert got and lost == 0 and duplicated == 0, (len(got), lost, duplicated)
            row = {"lost": lost, "duplicated": duplicated, "rows": len(got)}
    finally:
        runtime.shutdown()
    print(f"ZOO {source} x {sink}: allowed {row} (pause_s, downtime_s)={downtime}")


@pytest.mark.parametrize(
    ("source", "sink", "accept_loss", "reason"),
    REFUSED,
    ids=[f"{a}-{b}{'-accept_loss' if loss else ''}" for a, b, loss, _ in REFUSED],
)
def test_what_cannot_restart_is_refused_before_anything_is_touched(tmp_path, source, sink, accept_loss, reason):
    with line_server() as port:
        options = {"port": port} if source == "socket" else {}
        runtime = start(tmp_path, source, sink, accept_loss, **options)
        try:
            run_id = str(runtime.query.runId)
            for change in ({"state_partitions": 3}, {"master": "local[2]"}):
                with pytest.raises(ReconfigurationRefused, match="cannot stop and restart without losing data") as no:
                    reconfigure(runtime, **change)
                assert reason in str(no.value), str(no.value)
            assert runtime.is_active and str(runtime.query.runId) == run_id, "the query was never stopped"
            assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 2
            assert runtime.spark.sparkContext.master == "local[1]"
            status = runtime.status()
            assert status["delivery"]["restartable"] is False and source in status["source_kinds"]
        finally:
            runtime.shutdown()
    print(f"ZOO {source} x {sink}{' (accept_loss)' if accept_loss else ''}: refused ({reason})")
