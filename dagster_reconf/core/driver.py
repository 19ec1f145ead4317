"""The long-lived driver process of one managed stream.

``python -m dagster_reconf.core.driver <stream dir> [--paused]`` is what the supervisor
starts. It reads the stream's spec and token, opens the control endpoint on 127.0.0.1,
starts the query (not with ``--paused``: a reconfiguration that lost its driver
continues on a new one before the query runs again), and records ``driver.json`` (pid, control port, Spark app id, UI) so any later
process can find it. It runs until asked to shut down (control endpoint, SIGTERM or
SIGINT), then stops the query at a batch boundary and exits.

``driver.json`` moves through ``starting -> running -> stopped``, or ``failed`` with
the error, written atomically so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .control import (
    CodeCheckRequest,
    ControlServer,
    MigrateRequest,
    RestartRequest,
    ResumeRequest,
    RollbackReplayRequest,
    StartRequest,
    StateRequest,
    StopRequest,
    read_token,
)
from .paths import StreamPaths
from .reconfig.migration import StreamMigrator
from .runtime import StreamRuntime
from .spec import StreamSpec

__all__ = ["main", "write_driver_info"]


def write_driver_info(paths: StreamPaths, info: dict[str, Any]) -> None:
    """Replace ``driver.json`` atomically."""
    tmp = paths.driver.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=2, default=str))
    os.replace(tmp, paths.driver)


def run(paths: StreamPaths, paused: bool = False) -> int:
    spec = StreamSpec.parse(json.loads(paths.spec.read_text()))
    runtime = StreamRuntime(spec, paths)
    migrator = StreamMigrator(runtime)
    shutdown = threading.Event()
    info: dict[str, Any] = {"pid": os.getpid(), "name": spec.name, "status": "starting", "started_at": time.time()}

    def stop(req: StopRequest) -> dict[str, Any]:
        return asdict(runtime.stop_at_batch_boundary(req.timeout_s))

    def start(_: StartRequest) -> dict[str, Any]:
        runtime.start()
        return runtime.status()

    def restart(req: RestartRequest) -> dict[str, Any]:
        report = runtime.restart(req.settings, req.timeout_s)
        record_running()
        return report

    def record_running() -> None:
        context = runtime.spark.sparkContext
        info.update(status="running", app_id=context.applicationId, spark_ui=context.uiWebUrl, master=runtime.spec.master)
        write_driver_info(paths, info)

    def resume(req: ResumeRequest) -> dict[str, Any]:
        report = migrator.resume(req.settings)
        record_running()
        return report

    def shutdown_request(req: StopRequest) -> dict[str, Any]:
        report = runtime.stop_at_batch_boundary(req.timeout_s)
        shutdown.set()
        return asdict(report)

    server = ControlServer(
        read_token(paths.token),
        {
            ("GET", "/v1/status"): (None, lambda _: runtime.status()),
            ("POST", "/v1/stop"): (StopRequest, stop),
            ("POST", "/v1/start"): (StartRequest, start),
            ("POST", "/v1/restart"): (RestartRequest, restart),
            ("POST", "/v1/shutdown"): (StopRequest, shutdown_request),
            ("POST", "/v1/state"): (StateRequest, lambda req: migrator.state_summary(req.generation, req.batch_id)),
            ("POST", "/v1/code-check"): (CodeCheckRequest, lambda req: migrator.check_code_version(req.code_version)),
            ("POST", "/v1/migrate"): (MigrateRequest, lambda req: migrator.migrate(req.state_partitions, req.strategy)),
            ("POST", "/v1/rollback-replay"): (RollbackReplayRequest, lambda req: migrator.rollback_replay(req.generation)),
            ("POST", "/v1/resume"): (ResumeRequest, resume),
        },
    )
    server.start()
    info["control_port"] = server.port
    write_driver_info(paths, info)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: shutdown.set())
    try:
        if not paused:
            runtime.start()
        runtime.spark.sparkContext.setLogLevel("WARN")
        record_running()
        while not shutdown.wait(0.5):
            pass
        runtime.shutdown()
        info.update(status="stopped", stopped_at=time.time())
        return 0
    except BaseException as exc:  # recorded for the supervisor, then re-raised
        info.update(status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        try:
            runtime.shutdown(timeout_s=10)
        except Exception as cleanup:  # the original error matters more; keep both in the log
            print(f"cleanup after failure also failed: {cleanup}", file=sys.stderr)
        raise
    finally:
        write_driver_info(paths, info)
        server.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paused = "--paused" in args
    args = [a for a in args if a != "--paused"]
    if len(args) != 1:
        print("usage: python -m dagster_reconf.core.driver <stream directory> [--paused]", file=sys.stderr)
        return 2
    root = Path(args[0]).resolve()
    return run(StreamPaths(root.parent.parent, root.name), paused)


if __name__ == "__main__":
    sys.exit(main())
