"""Start, find, control and stop stream drivers; every stream is found again by name.

The supervisor is what the CLI and Dagster resources use. Its guarantees:

* ``start`` validates everything it can before spawning (spec, master reachability,
  writable directories, the checkpoint's data settings), then waits until the driver
  reports ``running``. If the driver fails or times out, its whole process group (the
  Python driver, Spark's JVM, Python workers) is killed: nothing is left half-started.
* ``stop`` asks the driver to stop at a batch boundary and exit; if it does not exit
  in time, the process group is terminated, then killed.
* A driver's liveness is checked by pid *and* command line, so a recycled pid is not
  mistaken for a live stream.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from dagster_reconf.core.errors import (
    ControlRequestError,
    ReconfError,
    StreamNotFoundError,
    StreamStartError,
    StreamStateError,
)
from dagster_reconf.core.process.control import LOOPBACK, ControlClient, log_tail, new_token
from dagster_reconf.core.process.control_tls import client_context, server_context
from dagster_reconf.core.process.definition_probe import IMPORT_TIMEOUT_S, probe_definition
from dagster_reconf.core.process.driver_start import check_master_reachable, check_writable, driver_environment
from dagster_reconf.core.process.endpoint_record import stream_token, token_from_env
from dagster_reconf.core.process.process_tree import KILL_GRACE_S, ask_to_leave, terminate_process_tree, wait_for_exit
from dagster_reconf.core.progress.lifecycle import query_end
from dagster_reconf.core.spec import StreamSpec, restart_scope, validate_spec
from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.metrics import MetricsStore, status_figures
from dagster_reconf.core.store.paths import StreamPaths, default_home

__all__ = ["StreamSupervisor"]

DRIVER_MODULE = "dagster_reconf.core.process.driver"
DEFAULT_START_TIMEOUT_S = 180.0
QUERY_END_TAIL_BYTES = 1 << 20  # an attached query's end is among its store's last records


@contextmanager
def _start_lock(home: Path, name: str) -> Iterator[None]:
    """Serialize starts of stream ``name`` under ``home`` (an advisory lock on a file beside the streams).

    The file lives only while a start holds it: the holder removes it before letting go, and a start that locked a
    file removed meanwhile (it waited on the holder's) locks the new one instead, so no start leaves one behind."""
    folder = Path(home) / "streams"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".{name}.start.lock"
    while True:
        handle = open(path, "a")  # noqa: SIM115 - held open until the block ends
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def driver_pids(paths: StreamPaths) -> set[int]:
    """The live driver processes of a stream on this host (a driver, a standby, a retired one still exiting), by
    command line, so a recycled pid is not taken for one."""
    pids = set()
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if DRIVER_MODULE in cmdline and str(paths.root) in cmdline:
            pids.add(proc.pid)
    return pids


def remove_dead_drivers_temp(paths: StreamPaths) -> list[int]:
    """Remove the temporary folders of the stream's drivers that are gone (killed: a clean exit leaves its folder
    empty); returns their pids. Each holds about 30 MB (the JVM's native libraries, Spark's local dirs)."""
    if not paths.driver_temp.is_dir():
        return []
    live, removed = driver_pids(paths), []
    for folder in paths.driver_temp.glob("driver-*"):
        pid = folder.name.removeprefix("driver-")
        if pid.isdigit() and int(pid) not in live:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(int(pid))
    return removed


def _client_of(info: dict[str, Any], paths: StreamPaths) -> ControlClient:
    """A client for the driver (or standby) that ``info`` records."""
    spec = StreamSpec.parse(json.loads(paths.spec.read_text()))
    host = info.get("control_host") or LOOPBACK
    return ControlClient(
        int(info["control_port"]), stream_token(spec, paths.token), host, paths.driver_log, client_context(spec)
    )


class StreamSupervisor:
    """Manages the stream drivers under one runtime home (default ``$RECONF_HOME`` or ``./.reconf``)."""

    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home).resolve() if home is not None else default_home()

    def paths(self, name: str) -> StreamPaths:
        return StreamPaths(self.home, name)

    def require(self, name: str) -> StreamPaths:
        """The stream's paths; StreamNotFoundError (naming the known streams) if there is no such stream."""
        paths = self.paths(name)
        if paths.attached.is_file() and not paths.spec.is_file():  # attached, no query of it seen yet
            from dagster_reconf.core.traces.attach import AttachedReader

            AttachedReader(paths).refresh()
        if not paths.spec.is_file():
            known = ", ".join(p.name for p in StreamPaths.all(self.home)) or "none"
            raise StreamNotFoundError(f"no stream named {name!r} under {self.home}; known streams: {known}")
        return paths

    # -- discovery ---------------------------------------------------------------------------

    def driver_info(self, name: str) -> dict[str, Any] | None:
        """``driver.json`` of a *live* driver, or None."""
        paths = self.paths(name)
        return self._live_record(paths, paths.driver)

    def driver_death(self, name: str) -> dict[str, Any] | None:
        """How the stream's driver died, where its record says it runs but no such process lives (a kill, a crash, a
        lost host): its pid and when it last wrote anything (its record or metrics). None: it runs, or it stopped."""
        paths = self.paths(name)
        try:
            info = json.loads(paths.driver.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if info.get("status") not in ("starting", "running") or self.driver_info(name) is not None:
            return None
        written = [p.stat().st_mtime for p in (paths.driver, paths.metrics) if p.exists()]
        return {"pid": info.get("pid"), "last_seen_at": max(written) if written else None}

    def standby_info(self, name: str) -> dict[str, Any] | None:
        """``standby.json`` of a *live* standby driver (see :meth:`start_standby`), or None."""
        paths = self.paths(name)
        return self._live_record(paths, paths.standby)

    @staticmethod
    def _live_record(paths: StreamPaths, record: Path) -> dict[str, Any] | None:
        try:
            info = json.loads(record.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if info.get("host", socket.gethostname()) != socket.gethostname():  # a driver on another host: trust its record
            return info if info.get("status") in ("starting", "running", "warm") else None
        pid = int(info.get("pid", 0))
        try:
            cmdline = psutil.Process(pid).cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        if DRIVER_MODULE not in cmdline or str(paths.root) not in cmdline:
            return None
        return info

    def metrics(self, name: str) -> MetricsStore:
        """The stream's metrics store, as this host reads it."""
        return MetricsStore(self.paths(name).metrics)

    def client(self, name: str) -> ControlClient:
        paths = self.require(name)
        info = self.driver_info(name)
        if info is None or "control_port" not in info:
            raise StreamStateError(f"stream {name!r} has no running driver; start it with `reconf stream start`")
        return _client_of(info, paths)

    def list(self) -> list[dict[str, Any]]:
        """Every stream under the home with its entrypoint, master and whether its driver runs."""
        return [self._row(paths) for paths in StreamPaths.all(self.home)]

    def row(self, name: str) -> dict[str, Any] | None:
        """:meth:`list`'s row of the stream ``name`` (None: the home holds no such stream)."""
        paths = self.paths(name)
        known = paths.spec.is_file() or paths.attached.is_file()
        return self._row(paths) if known else None

    def _row(self, paths: StreamPaths) -> dict[str, Any]:
        spec = json.loads(paths.spec.read_text()) if paths.spec.is_file() else {}  # attached, no query seen yet
        info = self.driver_info(paths.name)
        return {
            "name": paths.name,
            "entrypoint": spec.get("entrypoint") or f"attached: {paths.event_log}",
            "master": spec.get("master"),
            "driver": "running" if info else self._not_running(paths),
            "status": info.get("status") if info else None,
            "pid": info.get("pid") if info else None,
            "control_port": info.get("control_port") if info else None,
            "app_id": info.get("app_id") if info else None,
            "spark_ui": info.get("spark_ui") if info else None,
        }

    def _not_running(self, paths: StreamPaths) -> str:
        """A stream without a live driver: attached, stopped, or died (its driver vanished while it ran)."""
        if paths.attached.is_file():
            return "attached"
        return "died" if self.driver_death(paths.name) else "not running"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(
        self, spec: StreamSpec, *, timeout_s: float = DEFAULT_START_TIMEOUT_S, paused: bool = False
    ) -> dict[str, Any]:
        """Start a driver for ``spec`` and wait until its query runs (until the driver is up, if ``paused``).

        Raises:
            StreamStateError: a driver for this stream already runs.
            SpecError: the spec conflicts with the stream's existing data, or a directory is not writable.
            StreamStartError: the driver failed to start (its error and log tail are in the message).
        """
        paths = self.paths(spec.name)
        check_writable(self.home, "runtime home")  # before the start lock's file is made there
        with _start_lock(self.home, spec.name):  # two starts of one stream: the second finds the first's driver
            if self.driver_info(spec.name) is not None:
                raise StreamStateError(f"stream {spec.name!r} is already running; stop it first or pick another name")
            registered = paths.spec.is_file()
            try:
                return self._start(paths, spec, timeout_s, paused)
            except (ReconfError, OSError):
                if not registered:  # a first start that failed leaves no stream behind (its log stays)
                    paths.spec.unlink(missing_ok=True)
                    paths.token.unlink(missing_ok=True)
                raise

    def _start(self, paths: StreamPaths, spec: StreamSpec, timeout_s: float, paused: bool) -> dict[str, Any]:
        if spec.entrypoint is None:
            validate_spec(spec)  # an attached stream: refused with why, no process started
        # The user's module is imported in a child process: a missing, raising, exiting or looping one fails here.
        frozen = probe_definition(spec, driver_environment(spec), min(timeout_s, IMPORT_TIMEOUT_S))
        if paths.spec.is_file() and checkpoint_facts(paths.checkpoint).last_offset_batch is not None:
            old = StreamSpec.parse(
                json.loads(paths.spec.read_text())
            )  # a stream with data: refuse changes to its identity
            restart_scope(
                old,
                spec,
                stateful=checkpoint_facts(paths.checkpoint).stateful,
                frozen_options=frozen,
            )
        check_master_reachable(spec.master)
        check_writable(self.home, "runtime home")
        paths.create()
        data_root = paths.data_root_for(spec.storage)  # the new spec is not written yet: it must pass first
        for directory, what in (
            (data_root / paths.checkpoint.name, "checkpoint"),
            (paths.work, "work"),
            (data_root / paths.event_log.name, "event log"),
        ):
            check_writable(directory, what)
        server_context(spec)  # the certificate and key the driver reads at its start: fail here, not in its log
        if spec.control_token_env:
            token_from_env(spec.control_token_env)  # the driver reads it at its start: fail here, not in its log
            paths.token.unlink(missing_ok=True)
        else:
            new_token(paths.token)
        paths.write_spec(spec.model_dump_json(indent=2))
        paths.driver.unlink(missing_ok=True)
        return self._spawn(paths, spec, paths.driver, ["--paused"] if paused else [], "running", timeout_s)

    def _spawn(
        self, paths: StreamPaths, spec: StreamSpec, record: Path, flags: list[str], ready: str, timeout_s: float
    ) -> dict[str, Any]:
        """Start a driver process in its own session and wait until its ``record`` says ``ready``; on failure, kill
        it."""
        remove_dead_drivers_temp(paths)  # a killed driver's, before a new one adds its own
        with open(paths.driver_log, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", DRIVER_MODULE, str(paths.root), *flags],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=driver_environment(spec),
            )
        what = "standby driver" if record == paths.standby else "driver"
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                info = self._read_record(record)
                if info.get("pid") == proc.pid and info.get("status") == ready:
                    return info
                if info.get("pid") == proc.pid and info.get("status") == "failed":
                    raise StreamStartError(f"{what} of stream {spec.name!r} failed to start: {info.get('error')}")
                if proc.poll() is not None:
                    raise StreamStartError(
                        f"{what} of stream {spec.name!r} exited with code {proc.returncode} before it ran; "
                        f"log tail:\n{self.log_tail(spec.name)}"
                    )
                if time.monotonic() > deadline:
                    raise StreamStartError(
                        f"{what} of stream {spec.name!r} did not start within {timeout_s:g} s; "
                        f"log tail:\n{self.log_tail(spec.name)}"
                    )
                time.sleep(0.2)
        except BaseException:
            terminate_process_tree(proc.pid)
            proc.wait(timeout=KILL_GRACE_S)
            remove_dead_drivers_temp(paths)
            raise

    # -- handover to a warm standby driver --------------------------------------------------------

    def start_standby(
        self, name: str, changes: dict[str, Any], timeout_s: float = DEFAULT_START_TIMEOUT_S
    ) -> dict[str, Any]:
        """Start a warm standby driver with the stream's spec plus ``changes`` (the new settings, a new SparkContext
        among them).

        It starts its SparkContext, warms its Python workers and analyses the query while the
        stream keeps running in its driver, then waits to be promoted (:meth:`hand_over`).
        Idempotent: a live standby with the same settings is kept; one with other settings is
        replaced.

        Raises:
            SpecError: the changes are invalid for the stream.
            StreamStartError: the standby failed to start (its error and log tail are in the message).
        """
        paths = self.require(name)
        spec = StreamSpec.parse(json.loads(paths.spec.read_text())).with_changes(changes)
        validate_spec(spec)
        existing = self.standby_info(name)
        if (
            existing is not None
            and existing.get("status") == "warm"
            and existing.get("spec") == spec.model_dump(mode="json")
        ):
            return {**existing, "reused": True}
        self.clean_up_drivers(name)
        check_master_reachable(spec.master)
        replace_text(paths.standby_spec, spec.model_dump_json(indent=2))
        return self._spawn(paths, spec, paths.standby, ["--standby"], "warm", timeout_s)

    def hand_over(self, name: str, standby_pid: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Make the warm standby ``standby_pid`` the stream's driver: the old driver stops (at a batch boundary) and
        exits first.

        Call it with the stream paused; the standby then runs the rest of the reconfiguration.
        Idempotent: a standby already promoted is reported as such.

        Raises:
            StreamStateError: that standby is not alive (it died, or was replaced).
        """
        paths = self.require(name)
        current = self.driver_info(name)
        if current is not None and current.get("pid") == standby_pid:
            return {"driver_pid": standby_pid, "already_promoted": True}
        standby = self.standby_info(name)
        if standby is None or standby.get("pid") != standby_pid:
            raise StreamStateError(
                f"the standby driver {standby_pid} of stream {name!r} is gone; resume in the "
                "current driver, which restarts its SparkContext"
            )
        started = time.monotonic()
        retired, workers_stopped = None, None
        if current is not None:  # it is paused; it exits on its own, without writing driver.json again
            retired = current["pid"]
            try:
                workers_stopped = _client_of(current, paths).call("retire").get("python_workers_stopped")
            except ControlRequestError:  # hung or refused: it must not run beside the standby
                self.stop(name, timeout_s)
        try:
            info = _client_of(standby, paths).call("promote")
        except ControlRequestError as exc:  # the old driver waits for a commit that will not come: it goes now
            if retired is not None:
                ask_to_leave(retired)
                if not wait_for_exit(retired, timeout_s):
                    terminate_process_tree(retired)
            raise StreamStateError(
                f"the standby driver {standby_pid} of stream {name!r} refused to take over "
                f"({exc}); the old driver {retired} has exited: start a driver of the old settings"
            ) from None
        return {
            "driver_pid": info["pid"],
            "retired_pid": retired,
            "retired_python_workers_stopped": workers_stopped,
            "seconds": round(time.monotonic() - started, 3),
            "warm_up": standby.get("warm_up"),
        }

    def clean_up_drivers(self, name: str) -> list[int]:
        """Stop every driver process of the stream but the one ``driver.json`` names: a standby that was not promoted,
        an old driver still waiting or exiting after a handover. Returns their pids."""
        paths = self.paths(name)
        current = self.driver_info(name)
        standby = self.standby_info(name)
        keep = current.get("pid") if current else None
        strays = sorted(driver_pids(paths) - {keep})
        for pid in strays:
            if standby is not None and standby.get("pid") == pid:
                try:
                    _client_of(standby, paths).shutdown(30)
                except (ControlRequestError, StreamStateError):
                    pass  # hung or gone: the kill below
            else:  # a retired driver, perhaps still waiting for its successor's first commit
                ask_to_leave(pid)
            wait_for_exit(pid, KILL_GRACE_S)
            terminate_process_tree(pid)
        if standby is None or standby.get("pid") != keep:
            for path in (paths.standby, paths.standby_spec):
                path.unlink(missing_ok=True)
        remove_dead_drivers_temp(paths)
        return strays

    @staticmethod
    def _read_record(record: Path) -> dict[str, Any]:
        try:
            return json.loads(record.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def status(self, name: str) -> dict[str, Any]:
        """Live status from the driver, or the last recorded figures if it is not running (an attached stream's read
        from its event logs first)."""
        paths = self.require(name)
        if self.driver_info(name) is not None:
            return self.client(name).status()
        attached = paths.attached.is_file()
        if attached:
            from dagster_reconf.core.traces.attach import AttachedReader

            AttachedReader(paths).refresh()
        spec = json.loads(paths.spec.read_text())
        death = self.driver_death(name)
        store = self.metrics(name)
        ended = query_end(store.read(store.tail_offset(QUERY_END_TAIL_BYTES))[0]) if attached else None
        return {
            "name": name,
            "entrypoint": spec.get("entrypoint"),
            "state": self._not_running(paths),
            **({"died": death} if death else {}),
            **({"query_ended": {"at": ended.recorded_at, "exception": ended.exception}} if ended else {}),
            "master": spec.get("master"),
            **status_figures(store.last_progress()),
            "spec": spec,
        }

    def restart(self, name: str, settings: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        """Apply new settings in the running driver (query or session restart)."""
        return self.client(name).restart(settings, timeout_s)

    def stop(self, name: str, timeout_s: float = 120.0) -> dict[str, Any]:
        """Stop the query at a batch boundary and end the driver (forcibly if it hangs), and every other driver process
        of the stream: a stopped stream holds no cores or memory, not even through a warm standby that a
        reconfiguration in flight (or one interrupted) had started.

        Returns ``stopped``, the driver's stop report, ``forced`` if it had to be killed, and ``strays_stopped``: the
        pids of the other driver processes it ended.
        """
        self.require(name)
        info = self.driver_info(name)
        if info is None:
            strays = self.clean_up_drivers(name)
            return {
                "name": name,
                "stopped": False,
                "reason": "not running",
                **({"strays_stopped": strays} if strays else {}),
            }
        pid = int(info["pid"])
        report: dict[str, Any] = {"name": name, "stopped": True}
        try:
            report["stop"] = self.client(name).shutdown(timeout_s)
        except (ControlRequestError, StreamStateError) as exc:  # hung, gone or refused: fall through to the kill
            report["graceful_error"] = str(exc)
        if not wait_for_exit(pid, KILL_GRACE_S + timeout_s):
            report["forced"] = True
        terminate_process_tree(pid)
        strays = self.clean_up_drivers(name)  # removes the dead drivers' temp directories too
        if strays:
            report["strays_stopped"] = strays
        return report

    def log_tail(self, name: str, lines: int = 30) -> str:
        return log_tail(self.paths(name).driver_log, lines)
