"""Hosts on one machine: Linux network namespaces joined by a bridge (``make cluster``).

Every host is a network namespace with one veth link, ``eth0``, whose other end is a
port of a bridge that lives in a namespace of its own (the switch). Nothing is
added to the machine's own namespace: its interfaces, routes and firewall never see
the cluster, and the cluster's addresses cannot clash with the machine's. A host's
processes run with ``ip netns exec`` in a UTS namespace of their own, so they also
carry the host's name. The process that drives a scenario joins a host's namespace
with ``setns`` on its own thread (``Network.enter``).

Partitioning a host takes its switch port down: the host keeps its address and its
sockets, and its packets go nowhere, as when a cable or a switch dies.

Names start with ``tlc<pid>-``; ``Network.down`` (also on errors and signals) kills
every process left in the namespaces and deletes them, and ``sweep_leftovers`` removes
those of a driver that died without cleaning up.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import signal_group, stop_processes
from processes import process_alive

CLONE_NEWNET = 0x40000000
PREFIX = "tlc"
SUBNET = "10.213.15"  # inside the namespaces only


class NetworkError(RuntimeError):
    pass


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` meanwhile, so that ``finally`` blocks tear the
    network down when the driver is stopped (SIGINT already raises; SIGKILL leaves the
    namespaces to ``sweep_leftovers``)."""

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    netns: str
    port: str  # the switch-side end of its link


def _ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def missing_requirements() -> list[str]:
    """Why this machine cannot build the network ([] when it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    for tool in ("ip", "unshare", "setpriv"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            missing.append(f"`{tool}` (iproute2 / util-linux)")
    return missing


def sweep_leftovers() -> list[str]:
    """Delete namespaces (and their processes) of drivers that are no longer alive."""
    removed = []
    try:
        listing = _ip("netns", "list")
    except (NetworkError, FileNotFoundError):
        return removed
    for line in listing.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.match(rf"^{PREFIX}(\d+)-", name)
        if not match or process_alive(int(match.group(1))):
            continue
        _kill_namespace(name)
        removed.append(name)
    return removed


def _kill_namespace(netns: str) -> None:
    try:
        pids = _ip("netns", "pids", netns).split()
    except NetworkError:
        pids = []
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    # A killed process leaves its namespace when it is reaped; deleting is still safe.
    subprocess.run(["ip", "netns", "delete", netns], capture_output=True)


class Network:
    """The switch and the hosts of one scenario."""

    def __init__(self, prefix: str | None = None, subnet: str = SUBNET) -> None:
        self.prefix = prefix or f"{PREFIX}{os.getpid()}"
        self.subnet = subnet
        self.switch = f"{self.prefix}-switch"
        self.hosts: dict[str, Host] = {}
        self._created: list[str] = []
        self._processes: list[subprocess.Popen] = []

    def host(self, name: str, octet: int) -> Host:
        """Declare a host (before ``up``)."""
        host = Host(name, f"{self.subnet}.{octet}", f"{self.prefix}-{name}", f"p{octet}")
        self.hosts[name] = host
        return host

    # -- building and tearing down -------------------------------------------------------

    def up(self) -> None:
        sweep_leftovers()
        self._netns_add(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for host in self.hosts.values():
            self._netns_add(host.netns)
            _ip(
                "-n", self.switch, "link", "add", host.port, "type", "veth",
                "peer", "name", "eth0", "netns", host.netns,
            )  # fmt: skip
            _ip("-n", self.switch, "link", "set", host.port, "master", "br0")
            _ip("-n", self.switch, "link", "set", host.port, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")

    def _netns_add(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)

    def down(self, grace: float = 10.0) -> None:
        """Stop every process of the cluster (SIGKILL after ``grace``) and delete it all."""
        for process in stop_processes(self._processes, signal.SIGTERM, grace):
            signal_group(process, signal.SIGKILL)
        for name in reversed(self._created):
            _kill_namespace(name)
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._created.clear()

    # -- processes on hosts --------------------------------------------------------------

    def spawn(
        self,
        host: Host,
        command: Sequence[str],
        env: Mapping[str, str],
        log: Path,
        cwd: Path | None = None,
        user: str | None = None,
    ) -> subprocess.Popen:
        """Start ``command`` on ``host`` (its own process group), logging to ``log``."""
        prefix = ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--"]
        prefix += ["sh", "-c", 'hostname "$0" && exec "$@"', host.name]
        if user:
            prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [*prefix, *command],
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = log  # type: ignore[attr-defined]
        process.host = host  # type: ignore[attr-defined]
        self._processes.append(process)
        return process

    @staticmethod
    def signal(process: subprocess.Popen, signum: int, group: bool = False) -> None:
        if group:
            signal_group(process, signum)
            return
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    # -- the network's faults ------------------------------------------------------------

    def partition(self, host: Host) -> None:
        """Cut the host off: its switch port goes down, its packets go nowhere."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def heal(self, host: Host) -> None:
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def unacknowledged(self, host: Host, peer: Host) -> int:
        """Bytes sent on TCP connections between the two hosts, either way, not yet
        acknowledged: after a partition, 0 once every stalled exchange got through (TCP
        retransmits on its own backoff, up to two minutes after the link is back)."""
        total = 0
        for side, other in ((host, peer), (peer, host)):
            result = subprocess.run(
                ["ip", "netns", "exec", side.netns, "ss", "-Htn", "dst", other.address],
                capture_output=True,
                text=True,
                check=True,
            )
            for line in result.stdout.splitlines():
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    total += int(fields[2])  # Send-Q
        return total

    # -- the driver on a host ------------------------------------------------------------

    @contextmanager
    def enter(self, host: Host) -> Iterator[Host]:
        """Run the calling thread inside ``host``'s network namespace (sockets made
        meanwhile stay there), and come back afterwards."""
        libc = ctypes.CDLL(None, use_errno=True)
        home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{host.netns}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise NetworkError(f"setns into {host.netns}: errno {ctypes.get_errno()}")
            try:
                yield host
            finally:
                if libc.setns(home, CLONE_NEWNET) != 0:
                    raise NetworkError(f"setns back home: errno {ctypes.get_errno()}")
        finally:
            os.close(target)
            os.close(home)
