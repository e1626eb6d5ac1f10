"""``FakeHypervisor``: in-memory VMs, refusals that name the numbers, failures on purpose."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import CreateGate, FakeHypervisor, HostFull, SimulatedFailure
from vmsched_contract.messages import ZERO, AgentCommand, CommandAction, MigrationOrder, Overcommit, Resources
from vmsched_domain.fit import fits

HOST = HostSpec(id="h1", capacity=Resources(cpu=4, memory_mb=8192, disk_gb=100, gpu=0))


def create(cpu: int = 1, memory_mb: int = 1024, disk_gb: int = 10, gpu: int = 0) -> AgentCommand:
    resources = Resources(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu)
    return AgentCommand(action=CommandAction.CREATE, vm_id=uuid.uuid4(), name="vm", resources=resources)


async def test_a_vm_that_fits_is_created_and_counted_as_used() -> None:
    hypervisor = FakeHypervisor(HOST)

    await hypervisor.create_vm(create(cpu=3))

    assert hypervisor.used.cpu == 3


async def test_a_vm_that_does_not_fit_is_refused_with_every_missing_resource() -> None:
    hypervisor = FakeHypervisor(HOST)
    await hypervisor.create_vm(create(cpu=3, memory_mb=4096))

    with pytest.raises(HostFull) as refused:
        await hypervisor.create_vm(create(cpu=2, memory_mb=8192, gpu=1))

    assert str(refused.value) == (
        "no room on h1: cpu: needs 2, 1 free (4 total, 3 allocated); "
        "memory: needs 8192 MiB, 4096 MiB free (8192 MiB total, 4096 MiB allocated); "
        "gpu: needs 1, 0 free (0 total, 0 allocated)"
    )


async def test_overcommit_makes_room_for_what_it_names_only() -> None:
    host = HOST.model_copy(update={"overcommit": Overcommit(cpu=2.0, memory=1.5)})
    hypervisor = FakeHypervisor(host)

    await hypervisor.create_vm(create(cpu=8, memory_mb=12288))
    with pytest.raises(HostFull, match=r"disk: needs 200 GB, 90 GB free \(100 GB total, 10 GB allocated\)"):
        await hypervisor.create_vm(create(cpu=0, memory_mb=0, disk_gb=200))


async def test_the_ratios_a_command_carries_count_over_the_hosts_own() -> None:
    # An operator's overcommit (PATCH /v1/hosts) reaches the agent in the command: the scheduler
    # placed 6 cpus on this 4-cpu host by a ratio of 2, so the host takes them.
    hypervisor = FakeHypervisor(HOST)
    operators = Overcommit(cpu=2.0)

    await hypervisor.create_vm(create(cpu=6).model_copy(update={"overcommit": operators}))
    order = MigrationOrder(number=1, source="h0", target="h1")
    moving = AgentCommand(
        action=CommandAction.PREPARE_MIGRATION,
        vm_id=uuid.uuid4(),
        name="moving",
        resources=Resources(cpu=2, memory_mb=1024, disk_gb=10),
        migration=order,
        overcommit=operators,
    )
    await hypervisor.prepare_migration(moving)

    assert hypervisor.used.cpu == 8
    with pytest.raises(HostFull, match=r"cpu: needs 1, 0 free \(4 total x 2 overcommit, 8 allocated\)"):
        await hypervisor.create_vm(create(cpu=1).model_copy(update={"overcommit": operators}))
    with pytest.raises(HostFull, match=r"cpu: needs 1, -4 free \(4 total, 8 allocated\)"):
        await hypervisor.create_vm(create(cpu=1))  # without them, its own ratio of 1


_amounts = st.builds(
    Resources,
    cpu=st.integers(0, 64),
    memory_mb=st.integers(0, 65536),
    disk_gb=st.integers(0, 1000),
    gpu=st.integers(0, 4),
)
_ratios = st.builds(
    Overcommit,
    cpu=st.sampled_from([0.5, 1.0, 1.5, 2.0, 4.0, 16.0]),
    memory=st.sampled_from([0.5, 1.0, 1.5, 2.0]),
    disk=st.sampled_from([1.0, 2.0, 3.0]),
)


@settings(max_examples=200, deadline=None)
@given(capacity=_amounts, held=_amounts, wanted=_amounts, own=_ratios, placed_by=st.none() | _ratios)
async def test_a_simulated_host_takes_a_vm_exactly_when_the_fit_rule_says_it_fits(
    capacity: Resources, held: Resources, wanted: Resources, own: Overcommit, placed_by: Overcommit | None
) -> None:
    hypervisor = FakeHypervisor(HostSpec(id="h1", capacity=capacity, overcommit=own))
    hypervisor._hold(uuid.uuid4(), held)  # what it holds already, whether or not it fitted
    command = create().model_copy(update={"resources": wanted, "overcommit": placed_by})
    expected = fits(wanted, capacity, ZERO, placed_by or own, held)

    try:
        await hypervisor.create_vm(command)
    except HostFull:
        taken = False
    else:
        taken = True

    assert taken is expected


async def test_named_extra_resources_are_held_while_the_vm_lives_and_refused_beyond_the_hosts() -> None:
    hypervisor = FakeHypervisor(
        HOST.model_copy(update={"capacity": HOST.capacity.model_copy(update={"extra": {"fpga": 2}})})
    )
    fpga = Resources(cpu=1, memory_mb=1024, disk_gb=10, extra={"fpga": 2})
    first = AgentCommand(action=CommandAction.CREATE, vm_id=uuid.uuid4(), name="vm", resources=fpga)

    await hypervisor.create_vm(first)
    assert hypervisor.used.extra == {"fpga": 2}
    with pytest.raises(HostFull, match=r"extra: needs 2 fpga, 0 fpga free \(2 fpga total, 2 fpga allocated\)"):
        await hypervisor.create_vm(first.model_copy(update={"vm_id": uuid.uuid4()}))
    await hypervisor.delete_vm(first.model_copy(update={"action": CommandAction.DELETE}))
    assert hypervisor.used.extra == {}


async def test_without_the_capacity_check_everything_is_accepted() -> None:
    hypervisor = FakeHypervisor(HOST, check_capacity=False)

    await hypervisor.create_vm(create(cpu=64))

    assert hypervisor.used.cpu == 64


async def test_delete_frees_what_the_vm_held() -> None:
    hypervisor = FakeHypervisor(HOST)
    vm = create(cpu=4)
    await hypervisor.create_vm(vm)

    await hypervisor.delete_vm(vm.model_copy(update={"action": CommandAction.DELETE}))
    await hypervisor.create_vm(create(cpu=4))

    assert hypervisor.used.cpu == 4


async def test_the_fail_rate_fails_that_share_of_creates_reproducibly() -> None:
    async def failures(seed: int) -> list[bool]:
        hypervisor = FakeHypervisor(HOST, fail_rate=0.5, check_capacity=False, rng=random.Random(seed))
        outcome = []
        for _ in range(40):
            try:
                await hypervisor.create_vm(create())
                outcome.append(False)
            except SimulatedFailure:
                outcome.append(True)
        return outcome

    first = await failures(3)
    assert first == await failures(3)
    assert 10 < sum(first) < 30


async def test_measured_usage_is_the_hypervisors_own_plus_a_busy_share_of_what_its_vms_were_given() -> None:
    hypervisor = FakeHypervisor(HOST, busy=0.5)
    idle = hypervisor.usage()
    assert idle is not None
    assert (idle.cpu_used, idle.memory_used_mb) == (0.5, 1024)

    await hypervisor.create_vm(create(cpu=2, memory_mb=4096))

    busy = hypervisor.usage()
    assert busy is not None
    assert (busy.cpu_used, busy.memory_used_mb) == (0.5 + 0.5 * 2, 1024 + 2048)


async def test_hosts_differ_in_how_busy_their_vms_are_and_a_host_measures_nothing_when_told() -> None:
    busy = {FakeHypervisor(HostSpec(id=f"h{n}", capacity=HOST.capacity)).busy for n in range(20)}
    assert len(busy) == 20
    assert all(0.2 <= share <= 0.9 for share in busy)
    assert FakeHypervisor(HOST, measure_usage=False).usage() is None


async def test_a_create_gate_lets_the_allowed_creates_through_and_holds_the_rest_until_opened() -> None:
    hypervisor = FakeHypervisor(HOST)
    gate = CreateGate(allowed=2)
    hypervisor.gate = gate
    first, second, held = create(), create(), create()
    await hypervisor.create_vm(first)
    await hypervisor.create_vm(second)

    waiting = asyncio.create_task(hypervisor.create_vm(held))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert set(hypervisor.vms) == {first.vm_id, second.vm_id}

    gate.open()
    await asyncio.wait_for(waiting, timeout=5)
    assert held.vm_id in hypervisor.vms


async def test_a_create_that_fails_after_its_passage_gives_it_back() -> None:
    hypervisor = FakeHypervisor(HOST)
    hypervisor.gate = CreateGate(allowed=1)
    with pytest.raises(HostFull):
        await hypervisor.create_vm(create(cpu=5))  # more than the host has

    await asyncio.wait_for(hypervisor.create_vm(create(cpu=1)), timeout=5)  # the passage is still there
    assert hypervisor.used.cpu == 1
