"""SIGTERM in the middle of a run: a scheduler and then the gateway stop consuming, finish and ack what
they hold, and exit 0; once restarted, nothing is lost and nothing is done twice."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devtools.stack import Stack
from tests.faults.conftest import count_in, fault_stack, mixed_vm, online_fleet, submit, wait_running, wait_settled
from tests.faults.events import EventCounter
from tests.faults.invariants import check
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "sigterm"
HOSTS = 20
VMS = 1000
WHILE_DOWN = 300  # of them, accepted while the only scheduler is stopped


@pytest.fixture(scope="module")
def term_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(servers, Path(tmp_path_factory.mktemp("sigterm-logs")), schedulers=1) as stack:
        yield stack


@pytest.fixture(scope="module")
async def term_fleet(term_stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        term_stack,
        servers,
        SUITE,
        HOSTS,
        Resources(cpu=128, memory_mb=128 * 1024, disk_gb=4000),
        heartbeat_interval=1.0,
    ) as fleet:
        yield fleet


def terminate_gracefully(stack: Stack, name: str) -> None:
    service = stack.services[name]
    code = service.stop(timeout=45)
    # Killed after the timeout would be -9; a handler error at shutdown, 1.
    assert code == 0, f"{name} exited with {code}:\n{service.log_path.read_text(errors='replace')[-2000:]}"
    assert "shut down gracefully" in service.log_path.read_text(errors="replace")


async def test_sigterm_of_a_scheduler_and_the_gateway_mid_run_loses_and_repeats_nothing(
    term_stack: Stack, term_fleet: SimulatedFleet, servers: Servers
) -> None:
    rng = random.Random(15)
    async with (
        EventCounter(servers.amqp_url, "vm.assigned") as assigned,
        term_stack.async_client(timeout=120) as api,
    ):
        # Many small requests, so that the scheduler holds several messages when it is told to stop.
        vm_ids = await submit(api, [mixed_vm(rng, i, SUITE) for i in range(VMS - WHILE_DOWN)], batch=50)
        await wait_running(servers, vm_ids, 100)
        terminate_gracefully(term_stack, "scheduler-1")
        # Accepted while no scheduler runs: they wait in the quorum queue.
        vm_ids += await submit(api, [mixed_vm(rng, VMS + i, SUITE) for i in range(WHILE_DOWN)], batch=50)
        wanted = set(vm_ids)
        pending_while_down = await count_in(servers, vm_ids, "pending")
        term_stack.start_scheduler(1)

        await wait_running(servers, vm_ids, 500, timeout=120)
        terminate_gracefully(term_stack, "gateway")
        term_stack.start_gateway()

        await wait_settled(servers, vm_ids, timeout=240)
        report = await check(servers.asyncpg_dsn, vm_ids, term_fleet)
    print(f"SIGTERM: {VMS} VMs ({pending_while_down} pending while the only scheduler was down) -> {report.by_status}")
    assert pending_while_down >= WHILE_DOWN
    assert report.problems == []
    assert report.by_status.get("running", 0) == VMS
    mine = {vm_id: ids for vm_id, ids in assigned.by_vm.items() if vm_id in wanted}
    assert len(mine) == VMS
    assert all(len(set(ids)) == 1 for ids in mine.values()), "a VM announced under two message ids"
