"""A running vmsched (API, gateway, one scheduler as real processes) on this run's servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.stack import Stack, free_port, wait_for
from tests.servers import Servers


def stack_env(servers: Servers, **overrides: str) -> dict[str, str]:
    return servers.env(
        VMSCHED_AGENT_OFFLINE_TIMEOUT="15",
        VMSCHED_RECONCILE_INTERVAL="5",
        VMSCHED_REPUBLISH_AFTER="2",
        VMSCHED_LOG_LEVEL="INFO",
        # A failed on_failure VM comes back after this, not the default 15 s a test would idle through
        # (test_preemption); long enough that a test still sees it failed right after its failure.
        VMSCHED_RESTART_DELAY="4",
        # Many tests share one token: a limit meant for one client would turn their polling into 429s
        # (the limit has tests of its own, tests/unit/test_api_auth.py).
        VMSCHED_RATE_LIMIT="0",
        **overrides,
    )


@pytest.fixture(scope="session")
def stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    log_dir = Path(tmp_path_factory.mktemp("stack-logs"))
    running = Stack(env=stack_env(servers), log_dir=log_dir, api_port=free_port())
    with running.running(schedulers=1):
        yield running


@pytest.fixture(scope="session")
def replica(stack: Stack, servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Another API process on the same servers, with the same bootstrap token: started once for the
    tests about two replicas (each works with projects and tokens of its own)."""
    log_dir = Path(tmp_path_factory.mktemp("replica-logs"))
    second = Stack(env=stack_env(servers, VMSCHED_BOOTSTRAP_TOKEN=stack.token), log_dir=log_dir, api_port=free_port())
    try:
        api = second.start_api()
        wait_for(api.is_ready, 60, "the second API replica to be ready")
        yield second
    finally:
        second.stop()


@pytest.fixture(scope="session")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client(timeout=30) as client:
        yield client
