"""A source and sink zoo on real Spark: one small stateful stream per source kind Spark ships, into the sinks that
matter, each through a native state migration while it runs. Every case either finishes with nothing lost and
nothing duplicated (the output's ids against the input's), or is refused at preflight with its reason and left
running untouched; none ends in a stream that cannot start again.

Kafka's case is ``test_kafka.py`` (its broker); a memory *source* has no PySpark API."""

import json
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.paths import StreamPaths

from .conftest import wait_until

pytestmark = pytest.mark.spark

ALLOWED = [
    ("file", "file"),
    ("file", "foreachBatch"),
    ("rate", "file"),
    ("rate-micro-batch", "foreachBatch"),
    ("python", "file"),
    ("python", "foreachBatch"),
    ("rate", "console"),
]
REFUSED = [
    ("socket", "file", "socket source cannot resume exactly"),
    ("rate", "memory", "memory sink, which cannot restart from a checkpoint"),
]


def committed(runtime: StreamRuntime) -> int:
    batch = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    return -1 if batch is None else batch


class Files:
    """JSON files of ids dropped into a directory, 10 ids a file."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.written = directory, 0
        directory.mkdir(parents=True)

    def write(self, files: int) -> None:
        for _ in range(files):
            rows = "".join(json.dumps({"id": self.written + i}) + "\n" for i in range(10))
            path = self.directory / f"ids-{self.written:06d}.json"
            path.with_suffix(".tmp").write_text(rows)
            path.with_suffix(".tmp").rename(path)  # whole files only: Spark lists them at any moment
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


def start(spark, tmp_path, source: str, sink: str, **options) -> StreamRuntime:
    spec = StreamSpec(
        name=f"zoo_{source}_{sink}".lower().replace("-", "_"),  # the memory sink names a view after it
        entrypoint="tests.user_streams.zoo:zoo",
        options={"source": source, "sink": sink, "output_dir": str(tmp_path / "out"), **options},
        state_partitions=2,
        trigger_interval_s=0.5,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", spec.name), spark=spark)
    runtime.start()
    wait_until(lambda: committed(runtime) >= 0, timeout_s=120, what=f"{spec.name}: a first batch")
    return runtime


def migrate(runtime: StreamRuntime, partitions: int = 3):
    plan = ExecutionPlan.of(runtime.spec).model_dump()
    plan["partitioning"]["state_partitions"] = partitions
    ledger = AuditLedger(default_ledger_url(runtime.paths.home))
    return Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=20).run(plan, trigger={"kind": "zoo"})


def output_ids(spark, directory: Path) -> list[int]:
    if not directory.exists():
        return []
    return [row.id for row in spark.read.json(str(directory)).select("id").collect()]


@pytest.mark.parametrize(("source", "sink"), ALLOWED, ids=[f"{a}-{b}" for a, b in ALLOWED])
def test_a_migration_keeps_every_row_once(spark, tmp_path, source, sink):
    files = Files(tmp_path / "in") if source == "file" else None
    if files:
        files.write(3)
    runtime = start(spark, tmp_path, source, sink, **({"input_dir": str(files.directory)} if files else {}))
    try:
        if files:
            files.write(2)
        result = migrate(runtime)
        assert result.outcome == "succeeded", (result.outcome, result.reason, result.results.get("preflight"))
        assert result.verification.ok and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 3
        if files:
            files.write(2)
            runtime.query.processAllAvailable()
        else:
            resumed = committed(runtime)
            wait_until(lambda: committed(runtime) >= resumed + 2, timeout_s=60, what="two batches after the resume")
        runtime.stop_at_batch_boundary()
        assert runtime.query.exception() is None
        runtime.start()  # it starts again
        runtime.stop_at_batch_boundary()
    finally:
        runtime.shutdown()
    if sink == "console":
        row = {"lost": "n/a", "duplicated": "n/a"}
    else:
        got = output_ids(spark, tmp_path / "out")
        expected = set(range(files.written)) if files else set(range(max(got) + 1))
        lost, duplicated = len(expected - set(got)), len(got) - len(set(got))
        assert got and lost == 0 and duplicated == 0, (len(got), lost, duplicated)
        row = {"lost": lost, "duplicated": duplicated, "rows": len(got)}
    print(f"ZOO {source} x {sink}: allowed {row} downtime_s={result.observation.downtime_s}")


@pytest.mark.parametrize(("source", "sink", "reason"), REFUSED, ids=[f"{a}-{b}" for a, b, _ in REFUSED])
def test_what_cannot_restart_safely_is_refused_before_anything_is_touched(spark, tmp_path, source, sink, reason):
    with line_server() as port:
        runtime = start(spark, tmp_path, source, sink, **({"port": port} if source == "socket" else {}))
        try:
            run_id = str(runtime.query.runId)
            with pytest.raises(ReconfigurationRefused, match="cannot stop and restart without losing data") as refused:
                migrate(runtime)
            assert reason in str(refused.value) and "accept_loss=True" in str(refused.value) or sink == "memory"
            assert runtime.is_active and str(runtime.query.runId) == run_id, "the query was never stopped"
            assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 2
            status = runtime.status()
            assert status["delivery"]["restartable"] is False and source in status["source_kinds"]
        finally:
            runtime.shutdown()
    print(f"ZOO {source} x {sink}: refused ({reason})")
