"""The fleet the live-migration tests share (migrating a VM, draining a host, rebalancing plans):
each module names its hosts in ``FLEET`` (a :class:`tests.integration.moving.MigrationFleet`),
started once for the module; every test starts on empty, unpaused hosts whose simulated hypervisors
neither fail nor slow down."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.moving import MigrationFleet, settled, suites_vms
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet


@pytest.fixture(scope="module")
def fleet_plan(request: pytest.FixtureRequest) -> MigrationFleet:
    plan: MigrationFleet = request.module.FLEET
    return plan


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers, fleet_plan: MigrationFleet) -> AsyncIterator[SimulatedFleet]:
    async with await enrolled_fleet(servers, fleet_plan.specs(), heartbeat_interval=1.0) as running_fleet:
        host_ids = set(fleet_plan.host_ids)
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: {h["id"] for h in r.json() if h["status"] == "online"} >= host_ids,
                timeout=60,
                what=f"the {fleet_plan.suite} fleet online",
            )
        yield running_fleet


@pytest.fixture
async def api(
    stack: Stack, fleet: SimulatedFleet, fleet_plan: MigrationFleet, servers: Servers
) -> AsyncIterator[httpx.AsyncClient]:
    """A client; afterwards the simulated hypervisors as they were, every drain ended, the hosts
    unpaused and this test's VMs deleted."""
    async with stack.async_client(timeout=30) as client:
        yield client
        for hypervisor in fleet.hypervisors.values():
            hypervisor.fail_steps.clear()
            hypervisor.migration_delay = 0.0
        for host_id in fleet_plan.host_ids:
            await client.delete(f"/v1/hosts/{host_id}/drain")  # 404 when none: nothing to end
            await client.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": False})
        for vm_id in await suites_vms(servers, fleet_plan.suite):
            await settled(client, vm_id)
            await client.delete(f"/v1/vms/{vm_id}")
        await eventually(
            lambda: suites_vms(servers, fleet_plan.suite),
            lambda left: not left,
            timeout=30,
            what="this test's VMs deleted",
        )
