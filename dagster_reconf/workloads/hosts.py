"""Hosts simulated on one machine: Linux network namespaces on a private bridge.

Why: a control plane, a driver and Spark workers on different hosts only talk over the
network; on one machine they share loopback and every port. A network namespace per host
gives each its own interfaces, loopback and ports, so a process reaches another host only
at that host's address, through the bridge, the way it would across machines. The
namespaces share the file system: keeping each host to its own files is the caller's
discipline, and the object store is the only shared storage.

``with SimulatedHosts(["driver", "worker-1"]) as hosts:`` makes a bridge with its own /24
(the bridge's address, :attr:`SimulatedHosts.gateway`, is where this process, the "storage"
host, serves from), one namespace per host with a veth pair on the bridge, and loopback up.
Leaving the block kills what still runs in each namespace and removes them and the bridge.
Nothing is routed beyond the bridge. Needs root (``CAP_NET_ADMIN``) and iproute2's ``ip``:
:func:`hosts_unavailable` says why not where they are missing.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from dagster_reconf.core.process.local_cluster import alive_workers, daemon_env, master_args, spark_class, worker_args

__all__ = ["Host", "HostCluster", "SimulatedHosts", "hosts_unavailable", "start_spark_cluster"]

SUBNETS = ipaddress.ip_network("10.213.0.0/16")  # private; each SimulatedHosts takes a free /24 of it


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    if check and result.returncode != 0:
        raise OSError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result


def hosts_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None: they can): no ``ip``, not root, or the kernel refuses."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_NET_ADMIN)"
    probe = f"rcf-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"the kernel refused a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    """One simulated host: a network namespace with one address on the bridge."""

    name: str
    netns: str
    address: str
    link: str  # the bridge end of its veth pair (in the root namespace): down cuts the host off

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def driver_fields(self) -> dict[str, str]:
        """The spec fields of a stream whose driver runs here: Spark's driver and the control endpoint on this host's
        address."""
        return {"driver_host": self.address, "driver_bind_address": self.address, "control_bind_address": self.address}

    def start_agent(
        self, home: Path, storage: str, streams: Sequence[str], log: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """``reconf agent`` on this host for ``streams`` under ``storage``, their drivers under ``home``."""
        argv = [str(Path(sys.executable).with_name("reconf")), "--home", str(home), "agent", "--storage", storage]
        for name in streams:
            argv += ["--stream", name]
        return self.spawn(argv, log, env)

    def spawn(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` on this host in a session of its own, its output appended to ``log``."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.command(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )

    def run(self, argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = 300.0) -> str:
        """Run ``argv`` on this host to its end; its output, or a RuntimeError with it where it failed."""
        done = subprocess.run(
            self.command(argv), capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} on {self.name} exited with {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"
            )
        return done.stdout

    def pids(self) -> list[int]:
        """Every process running in this host's namespace."""
        listed = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True, check=False)
        return [int(pid) for pid in listed.stdout.split()]

    def kill_all(self, grace_s: float = 5.0) -> None:
        """SIGTERM every process on this host, then SIGKILL what survives ``grace_s`` (a host shut down); with no
        grace, SIGKILL only (a host that loses its power: nothing on it gets to clean up)."""
        signals = ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)) if grace_s > 0 else ((signal.SIGKILL, 5.0),)
        for sig, wait_s in signals:
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.pids():
                return

    def cut(self) -> None:
        """Cut this host's link to the bridge: its processes live on, unreachable and reaching nothing."""
        _ip("link", "set", self.link, "down")

    def reconnect(self) -> None:
        _ip("link", "set", self.link, "up")


class SimulatedHosts:
    """Hosts named ``names``, each a network namespace on one private bridge (see the module docstring)."""

    def __init__(self, names: Sequence[str]) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be distinct and at least one: {list(names)}")
        self.tag = secrets.token_hex(3)  # namespaces and links of concurrent instances never collide
        self.bridge = f"rcfb{self.tag}"
        self.subnet = _free_subnet()
        addresses = list(self.subnet.hosts())
        self.gateway = str(addresses[0])
        self.hosts = {
            name: Host(name, f"rcf-{self.tag}-{name}", str(addresses[k + 1]), f"rcfv{self.tag}{k}")
            for k, name in enumerate(names)
        }
        self._made: list[str] = []

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def start(self) -> Self:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(self.bridge)
            _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts.values():
                _ip("netns", "add", host.netns)
                self._made.append(host.netns)
                inner = f"rcfi{self.tag}{list(self.hosts).index(host.name)}"
                _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", host.netns)
                _ip("link", "set", host.link, "master", self.bridge)
                _ip("link", "set", host.link, "up")
                _ip("addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", inner, netns=host.netns)
                _ip("link", "set", inner, "up", netns=host.netns)
                _ip("link", "set", "lo", "up", netns=host.netns)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill what runs on each host, then remove the namespaces (their veth pairs go with them) and the bridge."""
        for host in self.hosts.values():
            if host.netns in self._made:
                host.kill_all()
                _ip("netns", "del", host.netns, check=False)
            _ip("link", "del", host.link, check=False)  # gone with its namespace, once the kernel has cleaned up
        if self.bridge in self._made:
            _ip("link", "del", self.bridge, check=False)
        self._made.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of :data:`SUBNETS` that no interface here has an address in."""
    shown = _ip("-o", "-4", "addr", "show").stdout.split()
    used = {ipaddress.ip_interface(word).network for word in shown if "/" in word and word[0].isdigit()}
    free = [net for net in SUBNETS.subnets(new_prefix=24) if not any(net.overlaps(u) for u in used)]
    if not free:
        raise OSError(f"every /24 of {SUBNETS} is in use on this machine")
    return free[secrets.randbelow(len(free))]


@dataclass(frozen=True)
class HostCluster:
    """A Spark standalone cluster whose master and workers run on simulated hosts."""

    master_url: str
    master_ui: str


MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 7077, 8080, 8081  # Spark's defaults: each host has its own ports


def start_spark_cluster(
    hosts: SimulatedHosts,
    master: str,
    workers: Sequence[str],
    directory: Path,
    cores_per_worker: int = 1,
    memory_per_worker: str = "1g",
    timeout_s: float = 120.0,
) -> HostCluster:
    """Start a master on host ``master`` and a worker on each of ``workers``, and wait until all registered.

    Each daemon keeps its logs and work under ``directory/<host>``; the hosts' teardown stops them."""
    on = hosts[master]
    cluster = HostCluster(f"spark://{on.address}:{MASTER_PORT}", f"http://{on.address}:{MASTER_UI_PORT}")
    daemons = [
        on.spawn(
            [str(spark_class()), *master_args(on.address, MASTER_PORT, MASTER_UI_PORT)],
            directory / master / "master.log",
            daemon_env(directory / master, on.address),
        )
    ]
    deadline = time.monotonic() + timeout_s
    started = False
    while alive_workers(cluster.master_ui) < len(workers):
        if not started and alive_workers(cluster.master_ui) >= 0:
            for name in workers:
                worker = hosts[name]
                args = worker_args(
                    cluster.master_url,
                    worker.address,
                    cores_per_worker,
                    memory_per_worker,
                    WORKER_UI_PORT,
                    directory / name / "work",
                )
                daemons.append(
                    worker.spawn(
                        [str(spark_class()), *args],
                        directory / name / "worker.log",
                        daemon_env(directory / name, worker.address),
                    )
                )
            started = True
        exited = [d for d in daemons if d.poll() is not None]
        if exited or time.monotonic() > deadline:
            raise RuntimeError(
                f"the cluster on hosts {master}, {', '.join(workers)} did not come up"
                + (f" (a daemon exited with {exited[0].returncode})" if exited else f" in {timeout_s:.0f} s")
                + f"; see the logs under {directory}"
            )
        time.sleep(0.3)
    return cluster
