"""A throwaway PostgreSQL server on 127.0.0.1 for tests (Debian's package, started per test session).

``make test`` installs the package with apt-get and sets ``RECONF_REQUIRE_POSTGRES=1``,
so there a missing server fails the tests instead of skipping them.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_S = 60


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a fresh cluster in a temporary directory; yield its SQLAlchemy URL; stop and remove it."""
    binaries = postgres_bin()
    if binaries is None:
        raise FileNotFoundError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql: apt-get install postgresql"
        )
    run_as: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="reconf-pg-"))
    if os.geteuid() == 0:  # initdb refuses to run as root: run the server as Debian's postgres user
        user = pwd.getpwnam("postgres")
        os.chown(data, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    pgdata = data / "pgdata"
    env = {**os.environ, "LC_ALL": "C"}
    subprocess.run(
        [*run_as, str(binaries / "initdb"), "-D", str(pgdata), "-U", "reconf", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
        env=env,
    )
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={data} -c fsync=off"
    subprocess.run(
        [
            *run_as,
            str(binaries / "pg_ctl"),
            "-D",
            str(pgdata),
            "-o",
            options,
            "-l",
            str(data / "server.log"),
            "-w",
            "-t",
            str(START_TIMEOUT_S),
            "start",
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while subprocess.run(
            [str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)], capture_output=True
        ).returncode:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"PostgreSQL on 127.0.0.1:{port} did not accept connections; see {data / 'server.log'}"
                )
            time.sleep(0.2)
        subprocess.run(
            [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "reconf", "ledger"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql://reconf@127.0.0.1:{port}/ledger"
    finally:
        subprocess.run(
            [*run_as, str(binaries / "pg_ctl"), "-D", str(pgdata), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(data, ignore_errors=True)
