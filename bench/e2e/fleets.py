"""The simulated fleet in processes of its own (bench/e2e_fleet.py), the receipts they write as their
agents take commands, and a stack of the services with its fleets online."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.e2e.isolation import Isolated
from bench.e2e.plan import BASE_REDIS, HEARTBEAT_INTERVAL, ROOT, SCHEDULERS
from devtools.stack import Stack, wait_for


@dataclass
class Fleet:
    """One e2e_fleet.py process and the receipts it writes, tailed by a thread."""

    process: subprocess.Popen[bytes]
    receipts_path: Path
    count: int
    receipts: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def start(
        cls,
        env: dict[str, str],
        workdir: Path,
        name: str,
        count: int,
        profile: str,
        labels: str = "",
        overcommit: float = 1.0,
    ) -> Fleet:
        path = workdir / f"{name}.receipts"
        argv = [
            sys.executable,
            str(ROOT / "bench" / "e2e_fleet.py"),
            f"--count={count}",
            f"--receipts={path}",
            f"--prefix={name}",
            f"--profile={profile}",
            f"--heartbeat-interval={HEARTBEAT_INTERVAL}",
            f"--overcommit-cpu={overcommit}",
        ]
        if labels:
            argv.append(f"--labels={labels}")
        log = (workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return cls(process, path, count)

    def wait_ready(self, timeout: float) -> float:
        ready = Path(f"{self.receipts_path}.ready")

        def is_ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"fleet process exited with {self.process.returncode}")
            return ready.exists()

        wait_for(is_ready, timeout, f"{self.count} simulated hosts", interval=0.2)
        self._thread = threading.Thread(target=self._tail, daemon=True)
        self._thread.start()
        return float(ready.read_text())

    def _tail(self) -> None:
        with self.receipts_path.open() as source:
            pending = ""
            while not self._stop.is_set():
                chunk = source.read()
                if not chunk:
                    time.sleep(0.02)
                    continue
                lines = (pending + chunk).split("\n")
                pending = lines.pop()
                for line in lines:
                    vm_id, _, at = line.split(" ")
                    self.receipts.setdefault(vm_id, float(at))

    def stop(self) -> None:
        self._stop.set()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def wait_hosts(prefix: str, count: int, timeout: float) -> None:
    client = redis.Redis.from_url(BASE_REDIS)
    wait_for(lambda: int(client.scard(f"{prefix}:hosts")) >= count, timeout, f"{count} hosts in the snapshot", 0.5)


@contextlib.contextmanager
def stack_with_fleets(
    iso: Isolated, workdir: Path, fleets: Sequence[tuple[str, int, str, str, float]]
) -> Iterator[tuple[Stack, list[Fleet], float]]:
    # No rate limit: the harness measures what the system takes, from one token.
    stack = Stack(env={**iso.env, "VMSCHED_RATE_LIMIT": "0"}, log_dir=workdir, api_port=18000 + random.randrange(1000))
    started: list[Fleet] = []
    with stack.running(schedulers=SCHEDULERS):
        try:
            began = time.monotonic()
            started = [Fleet.start(iso.env, workdir, *spec) for spec in fleets]
            for fleet in started:
                fleet.wait_ready(timeout=600)
            wait_hosts(iso.prefix, sum(f.count for f in started), timeout=120)
            yield stack, started, time.monotonic() - began
        finally:
            for fleet in started:
                fleet.stop()
