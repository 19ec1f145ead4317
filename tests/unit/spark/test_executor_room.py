"""What a standalone master has room for, read from its ``/json/`` page (served here on loopback in Spark's shape)."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.process.local_cluster import start_cluster
from dagster_reconf.core.spark.executor_room import (
    WorkerRoom,
    executor_memory_mb,
    executor_room_problem,
    granted_cores,
    master_ui,
    worker_rooms,
)
from dagster_reconf.core.spark.executors import STABLE_POLLS, _settled


def _worker(port: int, cores_free: int, memory_free: int, state: str = "ALIVE") -> dict:
    return {
        "id": f"worker-{port}",
        "host": "127.0.0.1",
        "port": port,
        "cores": 3,
        "coresused": 3 - cores_free,
        "coresfree": cores_free,
        "memory": 2048,
        "memoryused": 2048 - memory_free,
        "memoryfree": memory_free,
        "state": state,
    }


@pytest.fixture(name="master")
def master_fixture():
    """A loopback HTTP server answering ``/json/`` with the workers a test sets."""
    page = {"url": "spark://127.0.0.1:7077", "workers": [], "aliveworkers": 0, "activeapps": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps(page).encode()
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield page, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "value, mb", [("512m", 512), ("1g", 1024), ("2G", 2048), ("1t", 1 << 20), ("2048k", 2), ("300", 300), (None, 1024)]
)
def test_executor_memory_is_read_as_spark_reads_it(value, mb):
    assert executor_memory_mb(value) == mb


def test_a_size_that_is_not_one_is_named():
    with pytest.raises(ValueError, match="executor memory 'lots' is not a size; use e.g. 512m or 2g"):
        executor_memory_mb("lots")


def test_an_executor_fits_where_both_its_cores_and_its_memory_are_free():
    assert WorkerRoom("w", cores_free=3, memory_free_mb=1024).executors(1, 512) == 2  # memory binds
    assert WorkerRoom("w", cores_free=1, memory_free_mb=4096).executors(1, 512) == 1  # cores bind
    assert WorkerRoom("w", cores_free=3, memory_free_mb=4096).executors(2, 1024) == 1


def test_rooms_are_read_from_alive_workers_only(master):
    page, url = master
    page["workers"] = [_worker(1, 2, 1024), _worker(2, 3, 2048, state="DEAD")]
    assert worker_rooms(url) == [WorkerRoom("127.0.0.1:1", 2, 1024)]
    assert worker_rooms("http://127.0.0.1:9") is None  # nothing listens on the discard port


def test_granted_cores_count_the_applications_launched_executors_registered_or_not(master):
    page, url = master
    page["activeapps"] = [{"id": "app-1", "cores": 3, "state": "RUNNING"}, {"id": "app-2", "cores": 1}]
    assert granted_cores(url, "app-1") == 3
    assert granted_cores(url, "app-9") is None, "an application the master does not list"
    assert granted_cores("http://127.0.0.1:9", "app-1") is None


def test_settling_waits_for_the_masters_launched_executors_not_for_a_quiet_spell():
    # The master launched 3 and one has registered: no quiet spell ends the wait while two are on their way.
    assert not _settled(1, stable=STABLE_POLLS * 10, launched=lambda: 3)
    assert _settled(1, stable=1, launched=lambda: 1)
    assert not _settled(1, stable=0, launched=lambda: 1), "the one wanted has not registered yet"
    # A master that cannot tell: the quiet spell it was.
    assert not _settled(1, stable=STABLE_POLLS - 1, launched=lambda: None)
    assert _settled(1, stable=STABLE_POLLS, launched=None)


def test_a_shortfall_names_each_workers_free_cores_and_memory_and_the_fix(master, tmp_path):
    page, url = master
    # As `reconf cluster start` records a cluster under the runtime home (this process stands in for the master's).
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "cluster.json").write_text(
        json.dumps(
            {"master_url": "spark://127.0.0.1:7077", "master_ui": url, "master_pid": os.getpid(), "worker_pids": []}
        )
    )
    assert master_ui("spark://127.0.0.1:7077", tmp_path) == url
    assert master_ui("spark://127.0.0.1:7078", tmp_path) is None, "another master than the recorded one"
    page["workers"] = [_worker(1, 2, 1024), _worker(2, 1, 0)]
    kwargs = {"executor_cores": 1, "executor_memory": "1g", "home": tmp_path}
    assert executor_room_problem("spark://127.0.0.1:7077", 1, **kwargs) is None
    problem = executor_room_problem("spark://127.0.0.1:7077", 2, **kwargs)
    assert problem == (
        "standalone master spark://127.0.0.1:7077 has room for 1 more executor(s) of 1 core(s) and 1024 MiB, not the 2 "
        "this change adds (worker 127.0.0.1:1: 2 cores, 1024 MiB free; worker 127.0.0.1:2: 1 cores, 0 MiB free); give "
        "the workers more cores or memory (`reconf cluster start --cores N --memory SIZE`, or SPARK_WORKER_CORES / "
        "SPARK_WORKER_MEMORY), lower executor_memory, or plan fewer cores"
    )
    assert (
        executor_room_problem("spark://127.0.0.1:7077", 2, executor_cores=1, executor_memory="512m", home=tmp_path)
        is None
    )
    assert executor_room_problem("spark://127.0.0.1:7077", 0, **kwargs) is None


def test_masters_without_a_readable_ui_are_not_checked(tmp_path):
    assert master_ui("local[2]") is None and master_ui("yarn") is None
    assert master_ui("spark://127.0.0.1:9", tmp_path) is None  # no cluster recorded, nothing on port 8080 answers
    assert (
        executor_room_problem("spark://127.0.0.1:9", 5, executor_cores=1, executor_memory="1g", home=tmp_path) is None
    )


def test_a_cluster_with_a_bad_worker_memory_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(SpecError, match="memory_per_worker 'lots' is not a size; use e.g. 512m or 2g"):
        start_cluster(tmp_path, memory_per_worker="lots")
    assert not (tmp_path / "cluster").exists()
