"""Start the vmsched services as real processes: for `make run`, the end-to-end tests and the benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from vmsched_runtime.metrics_server import GATEWAY_METRICS_PORT, SCHEDULER_METRICS_PORT

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``condition`` until it holds; raise TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def bearer(token: str) -> dict[str, str]:
    """The header that authenticates an API request."""
    return {"Authorization": f"Bearer {token}"}


def api_client(base_url: str, token: str, **options: Any) -> httpx.AsyncClient:
    """An asyncio HTTP client of a vmsched API that sends ``token``."""
    return httpx.AsyncClient(base_url=base_url, headers=bearer(token), **options)


@dataclass
class Service:
    name: str
    argv: list[str]
    log_path: Path
    ready_line: str | None = None
    ready_url: str | None = None
    metrics_url: str | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
        log.close()

    def is_ready(self) -> bool:
        self.check_alive()
        if self.ready_url is not None:
            try:
                with urllib.request.urlopen(self.ready_url, timeout=1) as response:
                    return bool(response.status == 200)
            except OSError:
                return False
        if self.ready_line is not None:
            return self.ready_line in self.log_path.read_text(errors="replace")
        return True

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}; log tail:\n{tail}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """kill -9: no chance to clean up, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class Stack:
    """The three services and, optionally, a simulated fleet, all sharing one environment.

    The API gets a bootstrap admin token (``VMSCHED_BOOTSTRAP_TOKEN``: the environment's, else a
    random one): :meth:`client` and :meth:`async_client` send it."""

    env: dict[str, str]
    log_dir: Path
    api_port: int = 8000
    default_ports: bool = False  # the scheduler's and gateway's documented /metrics ports, if free
    services: dict[str, Service] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def __post_init__(self) -> None:
        self.token = self.env.setdefault("VMSCHED_BOOTSTRAP_TOKEN", self.token)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def client(self, **options: Any) -> httpx.Client:
        """An HTTP client of this stack's API, with its admin token."""
        return httpx.Client(base_url=self.api_url, headers=bearer(self.token), **options)

    def async_client(self, **options: Any) -> httpx.AsyncClient:
        """An asyncio HTTP client of this stack's API, with its admin token."""
        return api_client(self.api_url, self.token, **options)

    def _env(self) -> dict[str, str]:
        env = {**os.environ, **self.env, "VMSCHED_API_PORT": str(self.api_port), "PYTHONUNBUFFERED": "1"}
        env.setdefault("VMSCHED_LOG_FORMAT", "json")
        return env

    def add(
        self, name: str, argv: list[str], *, ready_line: str | None = None, ready_url: str | None = None
    ) -> Service:
        service = Service(name, argv, self.log_dir / f"{name}.log", ready_line=ready_line, ready_url=ready_url)
        self.services[name] = service
        return service

    def start_api(self, **env: str) -> Service:
        service = self.add("api", [str(BIN / "vmsched-api")], ready_url=f"{self.api_url}/readyz")
        service.start({**self._env(), **env})
        return service

    def start_scheduler(self, index: int = 1, **env: str) -> Service:
        service = self.add(f"scheduler-{index}", [str(BIN / "vmsched-scheduler")])
        preferred = SCHEDULER_METRICS_PORT if index == 1 else None
        service.start({**self._env(), **self._metrics_env(service, preferred), **env})
        return service

    def start_gateway(self, **env: str) -> Service:
        service = self.add("gateway", [str(BIN / "vmsched-gateway")])
        service.start({**self._env(), **self._metrics_env(service, GATEWAY_METRICS_PORT), **env})
        return service

    def _metrics_env(self, service: Service, preferred: int | None) -> dict[str, str]:
        """A /metrics port of its own for a process without HTTP (each replica needs its own): the
        service's documented default when this stack may take it (``make run``) and it is free. The
        service is ready once its /readyz on that port says so (its servers answer, its consumers
        consume)."""
        port = preferred if preferred is not None and self.default_ports and port_is_free(preferred) else free_port()
        service.metrics_url = f"http://127.0.0.1:{port}/metrics"
        service.ready_url = f"http://127.0.0.1:{port}/readyz"
        return {"VMSCHED_METRICS_HOST": "127.0.0.1", "VMSCHED_METRICS_PORT": str(port)}

    def enroll_agents(self, host_ids: list[str], path: Path) -> Path:
        """``vmsched-gateway enroll-agent`` for ``host_ids``: their credentials, one JSON line each, in
        ``path`` (readable by its owner only), for ``vmsched-agent simulate --credentials``."""
        done = subprocess.run(
            [str(BIN / "vmsched-gateway"), "enroll-agent", *host_ids],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        if done.returncode != 0:
            raise RuntimeError(f"enrolling the agents failed: {done.stderr.strip()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(done.stdout)
        return path

    def start_agents(self, name: str = "agents", *args: str) -> Service:
        service = self.add(name, [str(BIN / "vmsched-agent"), "simulate", *args])
        service.start(self._env())
        return service

    def start(self, *, schedulers: int = 1, timeout: float = 60.0) -> None:
        """API first (it migrates the schema), then gateway and schedulers; wait until all are ready."""
        api = self.start_api()
        wait_for(api.is_ready, timeout, "the API to be ready")
        gateway = self.start_gateway()
        started = [gateway] + [self.start_scheduler(i) for i in range(1, schedulers + 1)]
        for service in started:
            wait_for(service.is_ready, timeout, f"{service.name} to be ready")

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            with contextlib.suppress(Exception):
                service.stop()

    @contextlib.contextmanager
    def running(self, *, schedulers: int = 1, timeout: float = 60.0) -> Iterator[Stack]:
        try:
            self.start(schedulers=schedulers, timeout=timeout)
            yield self
        finally:
            self.stop()

    def log_lines(self, name: str) -> list[dict[str, object]]:
        lines = []
        for line in self.services[name].log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines
