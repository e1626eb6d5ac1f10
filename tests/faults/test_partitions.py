"""Network partitions: each service (API, scheduler, gateway) cut from each server (RabbitMQ,
PostgreSQL, Redis) for ``CUT`` seconds with VMs in flight, as "connection refused" and as "packets
dropped" (tests/faults/proxy.py), then healed. The simulated agents reach the broker directly: they
keep heartbeating through every cut, so the gateway cut from the broker hears none of them and must
not take the fleet for lost (the stack's lost timeout is shorter than the cut).

After each cut: the invariants (tests/faults/invariants.py), every VM running (none failed, none
deleted, no delete sent) within ``CONVERGE_WITHIN`` seconds of healing; during the cut, every request
answered within ``ANSWER_WITHIN`` seconds and none with a 500 (a 503 with Retry-After when the API
cannot do it); the service cut said so on its ``/readyz`` (the API's, or the scheduler's and the
gateway's on their metrics port) while cut, and was ready again within ``READY_AGAIN_WITHIN`` seconds
of healing. The gateway cut from any server leaves every host online (cut from the broker it hears no
heartbeat; cut from PostgreSQL or Redis it cannot fold them), and cut from the broker no VM asked
during the cut is told ``no_available_agents``. What a client saw during the cut (answers,
errors, the slowest answer, the readiness probes, the fewest hosts online) and how long convergence
took are printed as a table row (docs/reliability.md has the last run's).

One stack and one fleet serve every case: about 18 x (CUT + 20) seconds in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from devtools.stack import Stack, free_port, wait_for
from tests.faults.conftest import count_in, mixed_vm, online_fleet, submit, unsettled, wait_running
from tests.faults.invariants import check
from tests.faults.proxy import LinkState, Proxies
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import CommandAction, Resources

pytestmark = pytest.mark.slow

SUITE = "part"
HOSTS = 12
VMS = 300  # per case, in flight when the cut starts
CUT = float(os.environ.get("VMSCHED_PARTITION_CUT", "30"))
CONVERGE_WITHIN = 60.0
# Longest a client may wait for an answer during a cut: the client-side statement timeout
# (vmsched_pg.engine.COMMAND_TIMEOUT, 15 s), after a wait for a pooled connection that a statement
# stuck in the cut held (measured: 22 s at most); never the whole cut.
ANSWER_WITHIN = 25.0
# A service's /readyz keeps its verdict 1.5 s; a broker connection that was refused reconnects
# every second; a blackholed one waits for its held bytes.
READY_AGAIN_WITHIN = 30.0
# Longest a readiness probe may wait during a cut: every check at once, 1.5 s each (the API's: in
# turn, 2 s each), with room for the loaded machine.
PROBE_WITHIN = 7.0
OFFLINE_TIMEOUT = 5.0
LOST_TIMEOUT = 20.0  # shorter than the cut: a gateway that took silence for loss would fail VMs
SERVICES = ("api", "scheduler", "gateway")
SERVERS = {"broker": "VMSCHED_AMQP_URL", "database": "VMSCHED_DATABASE_URL", "redis": "VMSCHED_REDIS_URL"}
RESULTS = Path(os.environ.get("VMSCHED_PARTITION_RESULTS", "/tmp/vmsched-partitions.md"))


@dataclass
class PartitionedStack:
    stack: Stack
    proxies: Proxies


def _server_urls(servers: Servers) -> dict[str, str]:
    return {"broker": servers.amqp_url, "database": servers.database_url, "redis": servers.redis_url}


@pytest.fixture(scope="module")
def partitioned(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartitionedStack]:
    """API, gateway and one scheduler, each reaching each server through a link of its own."""
    proxies = Proxies()
    urls = _server_urls(servers)
    for service in SERVICES:
        for server, url in urls.items():
            proxies.add(f"{service}-{server}", url)

    def env_of(service: str) -> dict[str, str]:
        return {key: proxies.links[f"{service}-{server}"].url(urls[server]) for server, key in SERVERS.items()}

    stack = Stack(
        env=servers.env(
            VMSCHED_REPUBLISH_AFTER="2",
            VMSCHED_RATE_LIMIT="0",
            VMSCHED_AGENT_OFFLINE_TIMEOUT=str(OFFLINE_TIMEOUT),
            VMSCHED_AGENT_LOST_TIMEOUT=str(LOST_TIMEOUT),
            VMSCHED_RESEND_STALE_AFTER="10",
            VMSCHED_RECONCILE_INTERVAL="5",
        ),
        log_dir=Path(tmp_path_factory.mktemp("partition-logs")),
        api_port=free_port(),
    )
    try:
        api = stack.start_api(**env_of("api"))
        wait_for(api.is_ready, 60, "the API to be ready")
        started = [stack.start_gateway(**env_of("gateway")), stack.start_scheduler(1, **env_of("scheduler"))]
        for process in started:
            wait_for(process.is_ready, 60, f"{process.name} to be ready")
        yield PartitionedStack(stack, proxies)
    finally:
        stack.stop()
        proxies.close()


@pytest.fixture(scope="module")
async def fleet(partitioned: PartitionedStack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        partitioned.stack,
        servers,
        SUITE,
        HOSTS,
        Resources(cpu=1024, memory_mb=1024 * 1024, disk_gb=100_000),
        heartbeat_interval=1.0,
    ) as simulated:
        yield simulated


@dataclass
class Seen:
    """What a client saw during the cut: each answer's status (or error) and the slowest; how often
    the cut service's /readyz said not ready; the fewest of the fleet's hosts GET /v1/hosts showed
    online, from the cut until every VM settled."""

    answers: Counter[str] = field(default_factory=Counter)
    slowest: float = 0.0
    not_ready: int = 0
    ready_probes: int = 0
    slowest_probe: float = 0.0
    fewest_online: int | None = None
    accepted: list[str] = field(default_factory=list)  # the ids of the VMs accepted

    def saw_online(self, online: int | None) -> None:
        if online is not None:
            self.fewest_online = online if self.fewest_online is None else min(self.fewest_online, online)

    def summary(self) -> str:
        answers = ", ".join(f"{name} x{count}" for name, count in sorted(self.answers.items()))
        return f"{answers}; slowest {self.slowest:.1f} s"


def readyz_of(stack: Stack, service: str) -> str:
    """The /readyz of ``service``: the API's, or the scheduler's and the gateway's on their metrics port."""
    url = stack.services[{"scheduler": "scheduler-1"}.get(service, service)].ready_url
    assert url is not None
    return url


async def is_ready(url: str) -> bool:
    try:
        async with httpx.AsyncClient() as client:
            return (await client.get(url, timeout=5)).status_code == 200
    except httpx.HTTPError:
        return False


async def online_hosts(api: httpx.AsyncClient) -> int | None:
    """How many of the fleet's hosts GET /v1/hosts shows online; None when the API cannot say."""
    try:
        response = await api.get("/v1/hosts", timeout=5)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return sum(1 for h in response.json() if h["id"].startswith(SUITE) and h["status"] == "online")


async def watch(api: httpx.AsyncClient, readyz: str, seen: Seen, stop: asyncio.Event, rng: random.Random) -> list[str]:
    """While the cut lasts: a VM asked for every second (each on its own, so one that hangs does not
    stop the next), the cut service's /readyz and the hosts online asked every second. Returns the
    ids of the VMs accepted."""
    accepted = seen.accepted

    async def ask(index: int) -> None:
        started = time.monotonic()
        try:
            response = await api.post("/v1/vms", json=mixed_vm(rng, index, SUITE), timeout=CUT + 30)
            seen.answers[str(response.status_code)] += 1
            if response.status_code == 202:
                accepted.append(response.json()["id"])
        except httpx.HTTPError as error:
            seen.answers[type(error).__name__] += 1
        seen.slowest = max(seen.slowest, time.monotonic() - started)

    async def probe() -> None:
        started = time.monotonic()
        ready = await is_ready(readyz)
        seen.slowest_probe = max(seen.slowest_probe, time.monotonic() - started)
        seen.ready_probes += 1
        seen.not_ready += not ready

    async def count_online() -> None:
        seen.saw_online(await online_hosts(api))

    asks: list[asyncio.Task[None]] = []
    index = 0
    while not stop.is_set():
        asks.append(asyncio.create_task(ask(100_000 + index)))
        asks.append(asyncio.create_task(count_online()))
        await probe()
        index += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    await asyncio.gather(*asks)
    return accepted


def _record(row: str) -> None:
    with RESULTS.open("a") as results:
        results.write(row + "\n")


CASES = [
    pytest.param(service, server, state, id=f"{service}-{server}-{state.value}")
    # Most likely to find something first: the gateway deaf to heartbeats, the scheduler's truth away.
    for service, server in [
        ("gateway", "broker"),
        ("scheduler", "database"),
        ("api", "database"),
        ("scheduler", "redis"),
        ("scheduler", "broker"),
        ("gateway", "database"),
        ("gateway", "redis"),
        ("api", "broker"),
        ("api", "redis"),
    ]
    for state in (LinkState.BLACKHOLED, LinkState.REFUSED)
]


@pytest.mark.parametrize(("service", "server", "state"), CASES)
async def test_a_partition_heals_without_losing_or_destroying_anything(
    partitioned: PartitionedStack,
    fleet: SimulatedFleet,
    servers: Servers,
    service: str,
    server: str,
    state: LinkState,
) -> None:
    rng = random.Random(f"{service}-{server}-{state.value}")
    link = f"{service}-{server}"
    readyz = readyz_of(partitioned.stack, service)
    deletes_before = fleet.total_commands()[CommandAction.DELETE]
    seen = Seen()
    async with partitioned.stack.async_client(timeout=120) as api:
        vm_ids = await submit(api, [mixed_vm(rng, i, SUITE) for i in range(VMS)], batch=100)
        await wait_running(servers, vm_ids, VMS // 6)  # the cut lands mid-run
        stop = asyncio.Event()
        with partitioned.proxies.cut(link, state):
            watcher = asyncio.create_task(watch(api, readyz, seen, stop, rng))
            await asyncio.sleep(CUT)  # the cut's length is the point: nothing to wait for
            stop.set()
            # Told "no host" while the hosts were there all along (read before healing).
            nowhere = await count_in(servers, list(seen.accepted), "unschedulable", "failed")
        healed_at = time.monotonic()
        asked_in_cut = await watcher
        vm_ids += asked_in_cut
        with contextlib.suppress(TimeoutError):
            await eventually(
                lambda: is_ready(readyz), bool, timeout=READY_AGAIN_WITHIN, what="ready again", interval=0.2
            )
        ready_again = time.monotonic() - healed_at
        # Converged: every VM settled, and the fleet online again.
        deadline = healed_at + CONVERGE_WITHIN
        while time.monotonic() < deadline:
            online = await online_hosts(api)
            seen.saw_online(online)
            if online == HOSTS and await unsettled(servers, vm_ids) == 0:
                break
            await asyncio.sleep(0.5)
        converged = time.monotonic() - healed_at
        report = await check(servers.asyncpg_dsn, vm_ids, fleet)
    deletes = fleet.total_commands()[CommandAction.DELETE] - deletes_before
    row = (
        f"| {service} | {server} | {state.value} | {seen.summary()}; {service} /readyz 503 in {seen.not_ready} "
        f"of {seen.ready_probes} probes (slowest {seen.slowest_probe:.1f} s), ready {ready_again:.1f} s after "
        f"healing | {seen.fewest_online} of {HOSTS}; {nowhere} of {len(asked_in_cut)} asked failed or "
        f"unschedulable | {converged:.1f} s | {report.by_status} |"
    )
    print(row)
    await asyncio.to_thread(_record, row)
    assert converged < CONVERGE_WITHIN, f"not converged {CONVERGE_WITHIN:g} s after healing: {report.by_status}"
    assert report.problems == []
    assert report.by_status == {"running": len(vm_ids)}, "a VM failed, was deleted or is still on its way"
    assert deletes == 0, "a delete was sent: a healthy VM destroyed"
    assert "500" not in seen.answers, f"an internal error rather than a 503 during the cut: {seen.summary()}"
    assert seen.slowest < ANSWER_WITHIN, f"a request waited out the cut: {seen.summary()}"
    assert seen.not_ready > 0, f"the {service}'s /readyz said ready all through its cut"
    assert seen.slowest_probe < PROBE_WITHIN, f"a probe of the {service}'s /readyz waited {seen.slowest_probe:.1f} s"
    assert ready_again < READY_AGAIN_WITHIN, f"the {service} not ready {READY_AGAIN_WITHIN:g} s after healing"
    if service == "gateway":
        # Cut from the broker, it hears no heartbeat, and nothing else either; cut from PostgreSQL or
        # Redis, it hears the heartbeats but cannot fold them: either way it is the one cut off, not
        # the fleet (nor once healed, before every host's heartbeat is back).
        assert seen.fewest_online == HOSTS, f"hosts marked offline: {seen.fewest_online} of {HOSTS} online"
    if (service, server) == ("gateway", "broker"):
        assert nowhere == 0, f"{nowhere} VMs asked during the cut failed or unschedulable"
