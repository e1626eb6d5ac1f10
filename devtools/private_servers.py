"""A Redis and a PostgreSQL of their own on this machine, beside the shared ones: own port, own data
directory. A test that restarts or kills one does it to a server like this, never to the local
servers other work on the machine depends on (devtools.broker_node does the same for RabbitMQ).

PostgreSQL refuses to run as root: as root, its cluster is made and run as the ``postgres`` user
(``runuser``), in a directory under /var/tmp that user can reach; as anyone else, as that user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devtools.stack import free_port


def _wait_until(answers: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not answer within {timeout:.0f}s")


@dataclass
class RedisServer:
    base: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        """Start it empty (no RDB, no AOF: a restart loses everything, as a flushed cache does)."""
        self.base.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                shutil.which("redis-server") or "redis-server",
                "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.base), "--daemonize", "yes", "--pidfile", str(self.base / "redis.pid"),
                "--logfile", str(self.base / "redis.log"),
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )  # fmt: skip
        _wait_until(self._answers, timeout, f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """kill -9: everything in memory is gone."""
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.base / "redis.pid").read_text().strip())
            os.kill(pid, signal.SIGKILL)
            _wait_until(lambda: not _alive(pid), 30, f"redis-server {pid} to die")

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)


@dataclass
class PostgresServer:
    base: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of database ``vmsched`` (the services create it when missing)."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/vmsched"

    @property
    def data(self) -> Path:
        return self.base / "data"

    def _as_owner(self, *argv: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return list(argv)

    def create(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        self.base.chmod(0o700)
        subprocess.run(
            self._as_owner(_binary("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                           "--no-sync"),
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        """Start it (crash recovery first, after a :meth:`kill`) and return once it takes connections."""
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c max_connections=200 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        subprocess.run(
            self._as_owner(_binary("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.base / "log"), "-w",
                           "-t", str(int(timeout)), "start"),
            check=True,
            capture_output=True,
            timeout=timeout + 10,
        )  # fmt: skip

    def kill(self) -> None:
        """An immediate stop: every backend killed, no checkpoint; the next start recovers from the WAL."""
        subprocess.run(
            self._as_owner(_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"),
            check=True,
            capture_output=True,
            timeout=60,
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.kill()
        shutil.rmtree(self.base, ignore_errors=True)


def _binary(name: str) -> str:
    """A PostgreSQL server program: on PATH, else the newest Debian/Ubuntu install's."""
    found = shutil.which(name)
    if found:
        return found
    installed = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    if not installed:
        raise FileNotFoundError(f"PostgreSQL's {name} is neither on PATH nor under /usr/lib/postgresql")
    return str(installed[-1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@contextlib.contextmanager
def private_redis(base: Path) -> Iterator[RedisServer]:
    server = RedisServer(base)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="vmsched-postgres-", dir="/var/tmp")))
    try:
        server.create()
        server.start()
        yield server
    finally:
        server.stop()
