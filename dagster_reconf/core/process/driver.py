"""The long-lived driver process of one managed stream.

``python -m dagster_reconf.core.process.driver <stream dir> [--paused]`` is what the supervisor
starts. It reads the stream's spec and token, imports the user's stream definition,
opens the control endpoint (on 127.0.0.1 unless the spec names another address), starts
the query and waits until it has completed a trigger or waits for data, so a definition
that raises, returns the wrong thing or fails in its first batch fails the start (not with
``--paused``: a reconfiguration that lost its driver continues on a new one before the
query runs again). It records ``driver.json`` (pid, host, control address and port, Spark
app id, UI) so any later process can find it, and runs until asked to shut down (control
endpoint, SIGTERM or SIGINT), then stops the query at a batch boundary and exits.

``driver.json`` moves through ``starting -> running -> stopped``, or ``failed`` with
the error, written atomically so a reader never sees half a file.

``--standby`` starts a warm standby for a reconfiguration whose new settings need a new
SparkContext: it reads ``standby-spec.json``, starts the SparkContext, warms the Python
workers and analyses the user's query (:meth:`StreamRuntime.warm_up`), loads the state
readers, rehearses the query over the stream's first batch (output discarded), records
itself in ``standby.json`` as ``warm``, and waits. ``POST /v1/promote`` makes it the stream's
driver (it rewrites ``driver.json``) once the old driver has paused and been told to
retire (``POST /v1/retire``: it never touches ``driver.json`` again); the
reconfiguration then continues in it with that start-up already paid. The retired
driver kills its Python workers at once (a task the pause interrupted would spin a
core until its worker ends: :func:`~dagster_reconf.core.spark.python_worker_cpu.stop_python_workers`) and exits
once the stream commits a batch after the one it stopped at (the new driver's first),
or after :data:`RETIRED_LINGER_S`: its JVM's exit would otherwise take CPUs from the
new driver's first batch, all of it downtime.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.process.control import (
    Handler,
    RestartRequest,
    ResumeRequest,
    StartRequest,
    StopRequest,
    routes,
)
from dagster_reconf.core.process.control_server import ControlServer
from dagster_reconf.core.process.control_tls import server_context
from dagster_reconf.core.process.endpoint_record import (
    ControlEndpoint,
    pause_marker,
    publish_endpoint,
    stream_token,
    withdraw_endpoint,
)
from dagster_reconf.core.process.metrics_mirror import metrics_since
from dagster_reconf.core.spark.python_worker_cpu import stop_python_workers
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spark.state_migrator import StreamMigrator
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.checkpoint import last_committed_batch
from dagster_reconf.core.store.paths import StreamPaths

__all__ = ["await_commit_after", "main", "write_driver_info"]


def write_driver_info(path: Path, info: dict[str, Any]) -> None:
    """Replace a driver record (``driver.json``, or a standby's ``standby.json``) atomically."""
    replace_text(path, json.dumps(info, indent=2, default=str))


FIRST_TRIGGER_TIMEOUT_S = 150.0
RETIRED_LINGER_S = 60.0  # at most this long a retired driver waits for its successor's first commit before it exits


def await_commit_after(paths: StreamPaths, batch: int | None, timeout_s: float, leaving: threading.Event) -> bool:
    """Wait until the stream's checkpoint in force commits a batch after ``batch`` (True), ``timeout_s`` passes or
    ``leaving`` is set (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        committed = last_committed_batch(paths.checkpoint)
        if committed is not None and (batch is None or committed > batch):
            return True
        if leaving.wait(0.5):
            return False
    return False


def control_host(bind_address: str) -> str:
    """The address clients reach the control endpoint at: the bind address, or this host's name for a wildcard."""
    return socket.gethostname() if bind_address in ("0.0.0.0", "::", "") else bind_address


def run(paths: StreamPaths, paused: bool = False, standby: bool = False) -> int:
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "name": paths.name,
        "host": socket.gethostname(),
        "status": "starting",
        "started_at": time.time(),
    }
    record = paths.standby if standby else paths.driver  # a standby's record becomes driver.json when it is promoted
    try:
        spec = StreamSpec.parse(json.loads((paths.standby_spec if standby else paths.spec).read_text()))
        runtime = StreamRuntime(spec, paths, temp_dir=paths.driver_temp_of(os.getpid()))
    except BaseException as exc:  # a bad definition or spec: the supervisor reads the error from driver.json
        info.update(status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        write_driver_info(record, info)
        raise
    migrator = StreamMigrator(runtime)
    shutdown = threading.Event()
    if not paused and not standby and spec.storage is not None:
        marker = pause_marker(paths.data_root_for(spec.storage))
        if marker.exists():  # a control plane on another host holds the stream paused: its reconfiguration resumes it
            paused = True
            info["paused_by"] = str(marker)

    def stop(req: StopRequest) -> dict[str, Any]:
        return asdict(
            runtime.stop_at_batch_boundary(req.timeout_s, finish=req.finish, keep_interrupted=req.keep_interrupted)
        )

    def start(_: StartRequest) -> dict[str, Any]:
        runtime.start()
        return runtime.status()

    def restart(req: RestartRequest) -> dict[str, Any]:
        report = runtime.restart(req.settings, req.timeout_s)
        record_running()
        return report

    def record_running() -> None:
        context = runtime.spark.sparkContext
        info.update(
            status="running", app_id=context.applicationId, spark_ui=context.uiWebUrl, master=runtime.spec.master
        )
        write_driver_info(record, info)

    def promote(_: StartRequest) -> dict[str, Any]:
        nonlocal record
        if record == paths.driver:
            return info
        if info.get("status") != "warm":
            raise StreamStateError(f"the standby driver of stream {paths.name!r} is {info.get('status')}, not warm")
        record = paths.driver
        info["promoted_at"] = time.time()
        record_running()
        paths.standby.unlink(missing_ok=True)
        publish()
        return info

    published = False

    def publish() -> None:
        """Publish the endpoint under the stream's storage, for a control plane on another host (none without one)."""
        nonlocal published
        if spec.storage is None:
            return
        endpoint = ControlEndpoint(
            host=info["control_host"],
            port=server.port,
            pid=os.getpid(),
            driver_host=socket.gethostname(),
            started_at=info["started_at"],
            tls=server.tls,
        )
        publish_endpoint(paths.data_root_for(spec.storage), endpoint)
        published = True

    def resume(req: ResumeRequest) -> dict[str, Any]:
        report = migrator.resume(req.settings)
        record_running()
        return report

    retired = False
    retired_at: int | None = None  # the last batch committed when it retired
    leaving = threading.Event()  # SIGTERM or SIGINT: exit now, even while retired

    def retire(_: StartRequest) -> dict[str, Any]:
        nonlocal retired, retired_at
        if runtime.is_active:
            raise StreamStateError(f"stream {paths.name!r} is running in this driver: pause it before handing it over")
        retired_at = last_committed_batch(paths.checkpoint)
        retired = True  # driver.json is the standby's from now on: never write it again
        shutdown.set()
        # A Python task the pause interrupted would spin a core until its worker ends (see stop_python_workers).
        return {"retired": True, "pid": os.getpid(), "python_workers_stopped": stop_python_workers()}

    def shutdown_request(req: StopRequest) -> dict[str, Any]:
        try:
            return asdict(runtime.stop_at_batch_boundary(req.timeout_s))
        finally:
            # even when the stop fails (a failed query): the driver exits, the supervisor need not kill it
            shutdown.set()

    handlers: dict[str, Handler] = {
        "status": lambda _: {**runtime.status(), **server.in_flight()},  # a re-run waits for what is in flight
        "stop": stop,
        "start": start,
        "restart": restart,
        "shutdown": shutdown_request,
        "state": lambda req: migrator.state_summary(req.generation, req.batch_id),
        "states": lambda req: {"summaries": migrator.state_summaries([(r.generation, r.batch_id) for r in req.reads])},
        "code-check": lambda req: migrator.check_code_version(req.code_version),
        "migrate": lambda req: migrator.migrate(req.state_partitions, req.strategy),
        "precopy": lambda req: migrator.precopy(req.state_partitions, req.close_enough, req.merge),
        "executors": lambda req: runtime.add_executors(req.count),
        "rollback-replay": lambda req: migrator.rollback_replay(req.generation),
        "resume": resume,
        "promote": promote,
        "retire": retire,
        "metrics": lambda req: metrics_since(runtime.store, req.cursor, req.max_bytes, req.source),
    }
    token = stream_token(spec, paths.token)
    server = ControlServer(token, routes(handlers), host=spec.control_bind_address, tls=server_context(spec))
    server.start()
    info.update(control_port=server.port, control_host=control_host(spec.control_bind_address))
    write_driver_info(record, info)
    if not standby:  # a standby is reached through its own record, locally, until it is promoted
        publish()

    def leave(*_: Any) -> None:
        leaving.set()
        shutdown.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, leave)
    try:
        runtime.spark.sparkContext.setLogLevel("WARN")
        if standby:
            warm_up = runtime.warm_up()
            try:  # the stream's own query once, output discarded: its source reader and code warm in every worker
                warm_up["rehearsal"] = migrator.rehearse()
            except Exception as exc:  # a source that no longer serves its first batch: only a warm-up lost
                warm_up["rehearsal"] = {
                    "ran": False,
                    "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                }
            if runtime.stateful:  # load the state readers too: the verify after the pause reads state in this driver
                began = time.monotonic()
                try:
                    migrator.state_summary()
                    warm_up["state_readers_s"] = round(time.monotonic() - began, 3)
                except Exception as exc:  # the live driver's maintenance may drop files mid-read: only a warm-up lost
                    warm_up["state_readers_error"] = (
                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    )
            info.update(
                status="warm",
                warm_up={**warm_up, "since_start_s": round(time.time() - info["started_at"], 3)},
                spec=runtime.spec.model_dump(mode="json"),
            )
            write_driver_info(record, info)
        else:
            if not paused:
                runtime.start()
                info["first_trigger"] = runtime.await_healthy(FIRST_TRIGGER_TIMEOUT_S)
            record_running()
        while not shutdown.wait(0.5):
            pass
        if retired:
            await_commit_after(paths, retired_at, RETIRED_LINGER_S, leaving)
        runtime.shutdown(finish=not retired)  # retired: the stream's batches are the new driver's to finish
        info.update(status="stopped", stopped_at=time.time())
        return 0
    except BaseException as exc:  # recorded for the supervisor, then re-raised
        info.update(status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        try:
            runtime.shutdown(timeout_s=10, finish=not retired)
        except Exception as cleanup:  # the original error matters more; keep both in the log
            print(f"cleanup after failure also failed: {cleanup}", file=sys.stderr)
        raise
    finally:
        if not retired:
            write_driver_info(record, info)
        if published:
            try:
                withdraw_endpoint(paths.data_root_for(spec.storage), os.getpid())
            except Exception as exc:  # the store is unreachable: the record stays, naming a pid that is gone
                print(f"could not withdraw the control endpoint record: {exc}", file=sys.stderr)
        server.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    flags = {a for a in args if a.startswith("--")}
    args = [a for a in args if not a.startswith("--")]
    if len(args) != 1 or not flags <= {"--paused", "--standby"}:
        print(
            "usage: python -m dagster_reconf.core.process.driver <stream directory> [--paused | --standby]",
            file=sys.stderr,
        )
        return 2
    root = Path(args[0]).resolve()
    return run(StreamPaths(root.parent.parent, root.name), "--paused" in flags, "--standby" in flags)


if __name__ == "__main__":
    sys.exit(main())
