"""The cluster of ``make cluster``: a database host, two web hosts, three consumer hosts.

``db`` runs an own PostgreSQL cluster (``initdb`` in a temporary folder) and an own
``redis-server``, both listening on that host's address only. ``web-a`` and ``web-b``
run gunicorn with the same ``SECRET_KEY``; ``c1``, ``c2`` and ``c3`` run ``flask workers
--mode per-queue``. Each host has an instance folder of its own, so nothing a host
keeps locally can stand in for shared state. The driver of the scenario works from
an ``operator`` host on the same network.

The exact environment of every host is ``Cluster.env``; docs/deploy.md is written
from it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from bench.netns import Host, Network
from harness import GUNICORN_CONFIG, ROOT, stop_processes

WEB_PORT = 8000
PG_PORT = 5432
REDIS_PORT = 6379
# Short intervals, so that the scenario's faults are found in seconds, not minutes.
SETTINGS = {
    # Two seconds, so a worker starved of the processor for a moment (two web hosts and
    # three consumer hosts share a small machine) is not taken for a lost one.
    "TASK_RUNNER_HEARTBEAT_SECONDS": "2",
    "TASK_RUNNER_SWEEP_SECONDS": "2",
    "TASK_RUNNER_RELAY_SECONDS": "2",
    "NETWORK_CONNECT_TIMEOUT_SECONDS": "3",
    # Longer than the partition: a statement cut off mid-flight completes when the link
    # comes back, which is what makes a partitioned host's completions late.
    "NETWORK_DEAD_PEER_SECONDS": "90",
    "LLM_DRIVER": "fake",
    "BUILDER_STREAM_SECONDS": "20",
    "LOG_FILE": "-",
    "LOG_LEVEL": "INFO",
}
CONSUMER_HOSTS = ("c1", "c2", "c3")
WEB_HOSTS = {"A": "web-a", "B": "web-b"}


def postgres_bin() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not versions:
        raise RuntimeError("no PostgreSQL server under /usr/lib/postgresql/*/bin")
    return versions[-1].parent


def missing_servers() -> list[str]:
    missing = []
    if os.stat(os.devnull).st_mode & 0o666 != 0o666:
        missing.append(f"a {os.devnull} every user may write (the database runs unprivileged)")
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        missing.append("PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    return missing


@dataclass
class HostProcess:
    """One long-running process of a host (gunicorn, ``flask workers``)."""

    host: Host
    role: str
    process: subprocess.Popen
    started_at: float = field(default_factory=time.time)
    stopped_by: str | None = None  # "SIGTERM" (a deploy) or "SIGKILL" (a crash)

    @property
    def log(self) -> Path:
        return self.process.log_path  # type: ignore[attr-defined]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


class Cluster:
    """The hosts, their servers and processes; one database per queue driver."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.net = Network()
        self.db = self.net.host("db", 2)
        self.web = {name: self.net.host(host, 11 + i) for i, (name, host) in enumerate(
            WEB_HOSTS.items()
        )}  # fmt: skip
        self.consumers = {name: self.net.host(name, 21 + i) for i, name in enumerate(
            CONSUMER_HOSTS
        )}  # fmt: skip
        self.operator = self.net.host("operator", 100)
        self.secret_key = secrets.token_hex(32)
        self.processes: list[HostProcess] = []
        self.postgres: subprocess.Popen | None = None
        self.driver = ""
        self.database = ""

    # -- the network and the database host ------------------------------------------------

    def up(self) -> None:
        self.net.up()
        self._start_postgres()
        self._start_redis()

    def down(self) -> None:
        if self.postgres is not None and self.postgres.poll() is None:
            # SIGINT is PostgreSQL's fast shutdown (SIGTERM would wait for its clients).
            self.net.signal(self.postgres, signal.SIGINT)
            try:
                self.postgres.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.net.down()

    def _start_postgres(self) -> None:
        data = self.folder / "db" / "postgres"
        data.mkdir(parents=True)
        # The server runs as ``postgres``: it must be able to walk down to its folder.
        for folder in (self.folder, data.parent):
            folder.chmod(0o711)
        shutil.chown(data, "postgres", "postgres")
        bin_dir = postgres_bin()
        initdb = subprocess.run(
            ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
             str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
             "--no-sync", "-E", "UTF8", "--locale=C"],
            capture_output=True, text=True,
        )  # fmt: skip
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed: {initdb.stderr.strip()[-500:]}")
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {self.net.subnet}.0/24 trust\n")
        self.postgres = self.net.spawn(
            self.db,
            [str(bin_dir / "postgres"), "-D", str(data), "-p", str(PG_PORT),
             "-c", f"listen_addresses={self.db.address}",
             "-c", f"unix_socket_directories={data}",
             "-c", "max_connections=100", "-c", "shared_buffers=64MB",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            self._env(),
            self.folder / "logs" / "db-postgres.log",
            user="postgres",
        )  # fmt: skip
        self._wait_port(self.db, PG_PORT, "PostgreSQL")

    def _start_redis(self) -> None:
        data = self.folder / "db" / "redis"
        data.mkdir(parents=True)
        self.net.spawn(
            self.db,
            ["redis-server", "--bind", self.db.address, "--port", str(REDIS_PORT),
             "--save", "", "--appendonly", "no", "--dir", str(data),
             "--protected-mode", "no"],
            self._env(),
            self.folder / "logs" / "db-redis.log",
        )  # fmt: skip
        self._wait_port(self.db, REDIS_PORT, "Redis")

    def _wait_port(self, host: Host, port: int, what: str, timeout: float = 60.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        with self.net.enter(self.operator):
            while True:
                try:
                    socket.create_connection((host.address, port), timeout=1).close()
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{what} on {host.name} did not start") from None
                    time.sleep(0.2)

    # -- one round per queue driver ------------------------------------------------------

    def database_url(self, database: str | None = None) -> str:
        name = database or self.database
        return f"postgresql+psycopg://postgres@{self.db.address}:{PG_PORT}/{name}"

    def use_driver(self, driver: str) -> None:
        """A fresh database (and an empty Redis) for a round on ``driver``."""
        self.driver = driver
        self.database = f"cluster_{driver}"
        admin = create_engine(self.database_url("postgres"), isolation_level="AUTOCOMMIT")
        with self.net.enter(self.operator), admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {self.database}"))
        admin.dispose()

    def config(self) -> dict[str, Any]:
        """The settings every host shares, as app config (the driver's own app uses them)."""
        return {
            "SQLALCHEMY_DATABASE_URI": self.database_url(),
            "QUEUE_DRIVER": self.driver,
            "REDIS_URL": f"redis://{self.db.address}:{REDIS_PORT}/0",
            "SECRET_KEY": self.secret_key,
            **{key: _typed(value) for key, value in SETTINGS.items()},
        }

    def env(self, host: Host) -> dict[str, str]:
        """The exact environment of ``host``'s processes."""
        env = {
            "DATABASE_URL": self.database_url(),
            "QUEUE_DRIVER": self.driver,
            "REDIS_URL": f"redis://{self.db.address}:{REDIS_PORT}/0",
            "SECRET_KEY": self.secret_key,
            "INSTANCE_PATH": str(self.folder / "hosts" / host.name / "instance"),
            **SETTINGS,
        }
        if host in self.web.values():
            # Plain HTTP inside the test network: the session cookie cannot be Secure here.
            env["SESSION_COOKIE_SECURE"] = "0"
        return self._env(env)

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.folder),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            **(extra or {}),
        }

    def start_web(self, name: str) -> HostProcess:
        host = self.web[name]
        # The project's gunicorn.conf.py (threads, limits, hooks), with the host's address,
        # two workers and a short graceful stop.
        command = [
            sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONFIG),
            "--bind", f"{host.address}:{WEB_PORT}", "--workers", "2", "--graceful-timeout", "5",
        ]  # fmt: skip
        return self._start(host, "web", command)

    def start_consumers(self, name: str, periodic: bool) -> HostProcess:
        command = [sys.executable, "-m", "flask", "--app", "app", "workers", "--mode", "per-queue"]
        if not periodic:
            command.append("--no-periodic")
        role = "consumers+periodic" if periodic else "consumers"
        return self._start(self.consumers[name], role, command)

    def _start(self, host: Host, role: str, command: list[str]) -> HostProcess:
        log = self.folder / "logs" / f"{self.driver}-{host.name}-{len(self.processes)}.log"
        process = self.net.spawn(host, command, self.env(host), log, cwd=ROOT)
        entry = HostProcess(host, role, process)
        self.processes.append(entry)
        return entry

    def web_addresses(self) -> dict[str, str]:
        return {name: f"{host.address}:{WEB_PORT}" for name, host in self.web.items()}

    def live(self, host: Host, role_prefix: str = "consumers") -> HostProcess:
        """The running process of ``host`` with that role."""
        for entry in reversed(self.processes):
            if entry.host == host and entry.role.startswith(role_prefix):
                return entry
        raise LookupError(f"no {role_prefix} process on {host.name}")

    def terminate(self, entry: HostProcess, timeout: float = 30.0) -> int:
        """A deploy's stop: SIGTERM to ``flask workers`` (or gunicorn), which stops the rest."""
        entry.stopped_by = "SIGTERM"
        self.net.signal(entry.process, signal.SIGTERM)
        return entry.process.wait(timeout=timeout)

    def kill(self, entry: HostProcess) -> None:
        """A crash: SIGKILL to every process of the entry at once."""
        entry.stopped_by = "SIGKILL"
        self.net.signal(entry.process, signal.SIGKILL, group=True)
        entry.process.wait(timeout=10)

    def stop_round(self, timeout: float = 30.0) -> list[HostProcess]:
        """SIGTERM to every process still running, then wait for them all; return the ones
        that did not stop in time (they are SIGKILLed)."""
        by_process = {entry.process: entry for entry in self.processes}
        # To the leaders only, as systemd's KillMode=mixed does: they stop their children.
        stuck = stop_processes(list(by_process), signal.SIGTERM, timeout, group=False)
        for process in stuck:
            self.kill(by_process[process])
        return [by_process[process] for process in stuck]

    def consumer_logs(self, host: Host, since_process: int = 0) -> str:
        return "\n".join(
            entry.log_text()
            for entry in self.processes[since_process:]
            if entry.host == host and entry.role.startswith("consumers")
        )


def _typed(value: str) -> Any:
    return int(value) if value.isdigit() else value


def require_cluster_prerequisites() -> list[str]:
    """Everything missing to build the cluster on this machine ([] when nothing is)."""
    from bench.netns import missing_requirements

    return (
        missing_requirements()
        + missing_servers()
        + ([] if os.path.exists("/run") else ["/run (for /run/netns)"])
    )
