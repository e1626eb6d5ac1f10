"""A RabbitMQ node of its own on this machine, beside the shared one: its own node name, AMQP and
distribution ports and data directory. A test that stops, restarts or kills a broker does it to a
node like this, never to the local broker other work depends on.

It runs the packaged server's script directly (not the wrapper that switches to the rabbitmq user)
with the rabbitmq user's home, so the same Erlang cookie lets ``rabbitmqctl -n <node>`` reach it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devtools.stack import free_port

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
RABBITMQ_HOME = Path("/var/lib/rabbitmq")  # whose .erlang.cookie rabbitmqctl reads


@dataclass
class BrokerNode:
    name: str
    base: Path
    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)

    @property
    def node(self) -> str:
        return f"{self.name}@localhost"

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _environment(self) -> dict[str, str]:
        home = RABBITMQ_HOME if RABBITMQ_HOME.exists() else Path.home()
        return {
            **os.environ,
            "HOME": str(home),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_CONF_ENV_FILE": str(self.base / "rabbitmq-env.conf"),
            # No plugins: the management plugin would want the shared node's HTTP port.
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def start(self, timeout: float = 120.0) -> None:
        """Start the node and return once it serves AMQP."""
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (self.base / "rabbitmq-env.conf").write_text("")
        (self.base / "enabled_plugins").write_text("[].\n")
        script = str(SERVER_SCRIPT) if SERVER_SCRIPT.exists() else "rabbitmq-server"
        subprocess.run([script, "-detached"], env=self._environment(), check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._answers():
                self.rabbitmqctl("await_startup")
                return
            time.sleep(0.5)
        raise TimeoutError(f"RabbitMQ node {self.node} did not start within {timeout:.0f}s; see {self.base / 'log'}")

    def _answers(self) -> bool:
        try:
            self.rabbitmqctl("ping", timeout=10)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False
        return True

    def rabbitmqctl(self, *args: str, timeout: float = 120.0) -> str:
        done = subprocess.run(
            ["rabbitmqctl", "-q", "-n", self.node, *args], check=True, capture_output=True, timeout=timeout, text=True
        )
        return done.stdout

    def pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.base / "pid").read_text().strip())
        return None

    def kill(self) -> None:
        """kill -9 of the node's Erlang VM: a crash, nothing flushed."""
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop the node and remove its data."""
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.rabbitmqctl("stop", timeout=60)
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def broker_node(name: str, base: Path) -> Iterator[BrokerNode]:
    node = BrokerNode(name, base)
    node.start()
    try:
        yield node
    finally:
        node.stop()
