"""The process trees of drivers, standbys and cluster daemons: find, signal, wait for and end them.

Each driver and cluster daemon starts in a session of its own, so its whole tree (the Python
driver, Spark's JVM, Python workers, even a re-parented one) is found by session id.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

__all__ = [
    "KILL_GRACE_S",
    "ask_to_leave",
    "session_processes",
    "signal_processes",
    "terminate_process_tree",
    "wait_for_exit",
]

KILL_GRACE_S = 10.0


def session_processes(session_id: int) -> list[psutil.Process]:
    """Every live process of the session led by ``session_id`` (the driver and all it spawned).

    Drivers start in a session of their own, so this also finds a Spark JVM or Python
    worker that outlived the driver and was re-parented.
    """
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == session_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return found


def signal_processes(processes: list[psutil.Process], sig: signal.Signals) -> None:
    """Send ``sig`` to each process; one that already exited (a Python worker often has) is skipped."""
    for proc in processes:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def ask_to_leave(pid: int) -> None:
    """SIGTERM the driver process ``pid`` alone: it stops its runtime and exits (a retired driver waiting for its
    successor's first commit, too); its JVM and workers go with it."""
    try:
        psutil.Process(pid).send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        pass


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` exits within ``timeout_s``. Another parent's zombie has exited: only that parent (which
    does not reap it yet) still holds its pid, so waiting on it would run into the timeout. Our own child is reaped
    instead: it shows as a zombie as soon as its main thread is gone, while its other threads may still be exiting."""
    deadline = time.monotonic() + timeout_s
    try:
        proc = psutil.Process(pid)
        ours = proc.ppid() == os.getpid()
        while time.monotonic() < deadline:
            if not ours and proc.status() == psutil.STATUS_ZOMBIE:
                return True
            try:
                proc.wait(timeout=0.2)  # reaps it where it is our child
                return True
            except psutil.TimeoutExpired:
                continue
    except psutil.NoSuchProcess:
        return True
    return False


def terminate_process_tree(session_id: int, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM every process of the driver's session, then SIGKILL what survives ``grace_s``."""
    processes = session_processes(session_id)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_processes(processes, sig)
        _, alive = psutil.wait_procs(processes, timeout=grace_s)
        if not alive:
            return
        processes = alive
