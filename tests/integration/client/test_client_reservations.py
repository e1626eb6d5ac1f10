"""vmsched_client against the real stack: reservations held, taken by their project's VM, listed and
released, by the blocking and the asyncio client."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from devtools.stack import Stack, wait_for
from tests.integration.client.conftest import Fleet, small
from tests.integration.waiting import eventually
from vmsched_client import PLACED, AsyncClient, Client, Forbidden, NotFound
from vmsched_contract.api import (
    ProjectRequest,
    Reservation,
    ReservationRequest,
    TokenRequest,
)
from vmsched_contract.messages import HostSelectorTerm, SelectorOperator
from vmsched_contract.scopes import Scope
from vmsched_contract.status import ReservationStatus


def reservation_on(fleet: Fleet, project: str, count: int) -> ReservationRequest:
    """Slots the size of :func:`small`'s VMs on the suite's hosts; they end by themselves if a test
    fails before it ends them (other tests share the hosts)."""
    return ReservationRequest(
        project=project,
        cpu=1,
        memory_mb=256,
        disk_gb=1,
        count=count,
        host_selector=[HostSelectorTerm(key="suite", operator=SelectorOperator.IN, values=[fleet.suite])],
        ends_at=datetime.now(UTC) + timedelta(minutes=5),
    )


def placed(get: Callable[[], Reservation]) -> Reservation:
    seen: list[Reservation] = []

    def decided() -> bool:
        seen.append(get())
        return seen[-1].status is not ReservationStatus.PENDING

    wait_for(decided, 60, "the reservation placed", interval=0.2)
    return seen[-1]


def test_a_reservation_is_held_taken_by_its_projects_vm_listed_and_released(
    client: Client, stack: Stack, fleet: Fleet
) -> None:
    name = f"r{uuid.uuid4().hex[:8]}"
    client.create_project(ProjectRequest(name=name))
    created = client.create_reservation(reservation_on(fleet, name, count=2))
    try:
        assert (created.status, created.project, created.count) == (ReservationStatus.PENDING, name, 2)
        held = placed(lambda: client.get_reservation(created.id))
        assert (held.status, held.held, held.used) == (ReservationStatus.HELD, 2, 0), held
        assert set(held.hosts) <= set(fleet.hosts)
        assert created.id in {r.id for r in client.list_reservations(project=name)}

        token = client.create_token(TokenRequest(name="ci", project=name, scopes=[Scope.VMS_READ, Scope.VMS_WRITE]))
        with Client(stack.api_url, token.token) as member:
            assert [r.id for r in member.list_reservations()] == [created.id]  # its project's only
            vm = member.wait_for_vm(
                member.create_vm(small(f"{fleet.suite}-reserved", fleet, reservation=str(created.id))).id, timeout=60
            )
            assert vm.status in PLACED, vm
            assert (vm.reservation, vm.hypervisor_id in held.hosts) == (created.id, True)
            taken = member.get_reservation(created.id)
            assert (taken.held, taken.used) == (1, 1)
            with pytest.raises(Forbidden):
                member.delete_reservation(created.id)  # an admin ends it
            member.delete_vm(vm.id)
    finally:
        ended = client.delete_reservation(created.id)
    assert (ended.status, ended.held) == (ReservationStatus.RELEASED, 0)
    with pytest.raises(NotFound):
        client.get_reservation(uuid.uuid4())


async def test_the_asyncio_client_holds_and_releases_a_reservation(stack: Stack, fleet: Fleet) -> None:
    async with AsyncClient(stack.api_url, stack.token) as client:
        name = f"r{uuid.uuid4().hex[:8]}"
        await client.create_project(ProjectRequest(name=name))
        created = await client.create_reservation(reservation_on(fleet, name, count=1))
        try:
            assert created.id in {r.id for r in await client.list_reservations(project=name)}
            seen = await eventually(
                lambda: client.get_reservation(created.id),
                lambda r: r.status is not ReservationStatus.PENDING,
                timeout=60,
                what="the reservation placed",
            )
            assert (seen.status, seen.held) == (ReservationStatus.HELD, 1), seen
        finally:
            ended = await client.delete_reservation(created.id)
        assert ended.status is ReservationStatus.RELEASED
