"""Every service's /readyz (the API's, the scheduler's and the gateway's on their metrics port), on the
real processes, each reaching each server through a link of its own: ready while
every server answers; while one is cut (refused, or its packets dropped: tests/faults/proxy.py), not
ready within a couple of seconds, naming it, each probe answered within ANSWER_WITHIN; ready again
once it heals."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from devtools.stack import Stack, free_port, wait_for
from tests.faults.proxy import LinkState, Proxies
from tests.integration.waiting import eventually
from tests.servers import Servers

SERVERS = {"broker": "VMSCHED_AMQP_URL", "database": "VMSCHED_DATABASE_URL", "redis": "VMSCHED_REDIS_URL"}
SERVICES = {"api": "api", "scheduler": "scheduler-1", "gateway": "gateway"}
EVERYTHING_READY = {"broker": "ok", "consumers": "ok", "database": "ok", "redis": "ok"}
API_READY = {"broker": "ok", "database": "ok", "redis": "ok"}  # the API consumes nothing
# What a probe may wait under a cut: every check at once, 1.5 s each, answered by the HTTP thread
# within 2 s whatever the event loop does; a little more for a loaded machine.
ANSWER_WITHIN = 3.0


@dataclass
class Cuttable:
    stack: Stack
    proxies: Proxies

    def readyz(self, service: str) -> str:
        url = self.stack.services[SERVICES[service]].ready_url
        assert url is not None
        return url


@pytest.fixture(scope="module")
def cuttable(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cuttable]:
    """An API, a gateway and a scheduler, each reaching each server through a link of its own."""
    urls = {"broker": servers.amqp_url, "database": servers.database_url, "redis": servers.redis_url}
    proxies = Proxies()
    for service in SERVICES:
        for server, url in urls.items():
            proxies.add(f"{service}-{server}", url)

    def env_of(service: str) -> dict[str, str]:
        return {key: proxies.links[f"{service}-{server}"].url(urls[server]) for server, key in SERVERS.items()}

    stack = Stack(
        env=servers.env(VMSCHED_RATE_LIMIT="0"),
        log_dir=Path(tmp_path_factory.mktemp("readiness-logs")),
        api_port=free_port(),
    )
    try:
        api = stack.start_api(**env_of("api"))
        wait_for(api.is_ready, 60, "the API to be ready")
        started = [stack.start_gateway(**env_of("gateway")), stack.start_scheduler(1, **env_of("scheduler"))]
        for process in started:
            wait_for(process.is_ready, 60, f"{process.name} to be ready")
        yield Cuttable(stack, proxies)
    finally:
        stack.stop()
        proxies.close()


async def probe(client: httpx.AsyncClient, url: str) -> tuple[int, dict[str, str], float]:
    started = time.monotonic()
    response = await client.get(url, timeout=10)
    return response.status_code, response.json(), time.monotonic() - started


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_ready_while_every_server_answers(cuttable: Cuttable, service: str) -> None:
    async with httpx.AsyncClient() as client:
        status, body, _ = await probe(client, cuttable.readyz(service))
    assert (status, body) == (200, API_READY if service == "api" else EVERYTHING_READY)


@pytest.mark.parametrize("state", [LinkState.REFUSED, LinkState.BLACKHOLED], ids=lambda state: state.value)
@pytest.mark.parametrize("server", sorted(SERVERS))
@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_not_ready_naming_the_server_cut_then_ready_once_healed(
    cuttable: Cuttable, service: str, server: str, state: LinkState
) -> None:
    url = cuttable.readyz(service)
    slowest = 0.0

    async def ask() -> tuple[int, dict[str, str], float]:
        nonlocal slowest
        answer = await probe(client, url)
        slowest = max(slowest, answer[2])
        return answer

    async with httpx.AsyncClient() as client:
        await eventually(ask, lambda answer: answer[0] == 200, timeout=30, what=f"{service} ready before the cut")
        with cuttable.proxies.cut(f"{service}-{server}", state):
            status, body, _ = await eventually(
                ask, lambda answer: answer[0] == 503, timeout=10, what=f"{service} not ready with {server} cut"
            )
            assert body[server] != "ok", body
            # The others still answer (a broker cut also stops the consumers).
            assert {name for name, answer in body.items() if answer != "ok"} <= {server, "consumers"}, body
            # Asked again and again while cut, it keeps saying so, each answer in time.
            for _ in range(3):
                status, body, _ = await ask()
                assert status == 503
                assert body[server] != "ok", body
        await eventually(ask, lambda answer: answer[0] == 200, timeout=60, what=f"{service} ready once healed")
    assert slowest < ANSWER_WITHIN, f"a probe waited {slowest:.1f} s"
