"""The ``storage`` filter: the engine's vectorised first fit equals vmsched_domain.storage's, host by
host, on fleets of local and shared pools, and follows bookings on the fleet (a shared pool's space
counted once whichever host takes the VM)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import context, fleet_of, host, request
from vmsched_domain.storage import PoolRoom, VolumeAsk, assign_volumes, per_pool
from vmsched_placement import HostState, RequestVector, decide
from vmsched_placement.filters import StorageFilter

SSD = frozenset({"ssd"})


def local(name: str, capacity: int, allocated: int = 0, tags: frozenset[str] = SSD) -> PoolRoom:
    return PoolRoom(name, False, capacity, allocated, tags)


def shared(name: str) -> PoolRoom:
    return PoolRoom(name, True, 0, 0)


def test_storage_sets_no_constraint_for_a_vm_without_volumes() -> None:
    fleet = fleet_of(replace(host(), storage_pools=(local("l", 10),)))
    assert StorageFilter().mask(fleet.columns, RequestVector.of(request(), context())) is None


def test_storage_rejects_a_host_without_room_and_says_why() -> None:
    fleet = fleet_of(replace(host("hv-01"), storage_pools=(local("l", 100, 60),)), replace(host("hv-02")))
    vm = replace(request(), volumes=(VolumeAsk(50, SSD),))
    mask = StorageFilter().mask(fleet.columns, RequestVector.of(vm, context()))
    assert mask is not None
    assert mask.tolist() == [False, False]
    assert StorageFilter().reason(fleet, 0, RequestVector.of(vm, context())) == (
        "storage: volume 1 (50 GB tagged ssd) fits no pool (l local 40 GB free of 100, ssd)"
    )
    assert decide(fleet, vm, context()).reason == "storage"


def test_a_shared_pool_is_counted_once_for_every_host_that_reaches_it() -> None:
    hosts = [replace(host(f"hv-0{i}"), storage_pools=(shared("ceph"),)) for i in range(3)]
    fleet = fleet_of(*hosts)
    fleet.set_shared_pools({"ceph": PoolRoom("ceph", True, 100, 0, SSD)})
    vm = replace(request(), volumes=(VolumeAsk(40, SSD),))
    placed: list[str | None] = []
    for _ in range(3):
        decision = decide(fleet, vm, context())
        if decision.host_id is None:
            placed.append(None)
            continue
        assert decision.volumes == ("ceph",)
        fleet.allocate(decision.host_id, vm.demand, {"ceph": 40})
        placed.append(decision.host_id)
    assert placed[2] is None
    assert None not in placed[:2]
    fleet.release(str(placed[0]), vm.demand, {"ceph": 40})
    assert decide(fleet, vm, context()).host_id is not None


NAMES = ["a", "b", "local"]
TAGS = st.frozensets(st.sampled_from(["ssd", "hdd"]), max_size=2)


@st.composite
def pool_fleets(draw: st.DrawFn) -> tuple[list[HostState], dict[str, PoolRoom]]:
    shared_pools = {}
    for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=2)):
        capacity = draw(st.integers(0, 100))
        shared_pools[name] = PoolRoom(name, True, capacity, draw(st.integers(0, capacity)), draw(TAGS))
    hosts: list[HostState] = []
    for i in range(draw(st.integers(1, 6))):
        reached = []
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3)):
            if name in shared_pools or draw(st.booleans()):
                reached.append(shared(name))
            else:
                capacity = draw(st.integers(0, 100))
                reached.append(local(name, capacity, draw(st.integers(0, capacity)), draw(TAGS)))
        hosts.append(replace(host(f"hv-{i:02}"), storage_pools=tuple(reached)))
    return hosts, shared_pools


# Some volumes stay on a shared pool (a migrating VM's): only whether a host reaches it counts.
VOLUMES = st.lists(
    st.builds(VolumeAsk, st.integers(1, 60), TAGS, st.one_of(st.none(), st.none(), st.sampled_from(NAMES))),
    min_size=1,
    max_size=3,
)


def test_a_migrating_vms_shared_volume_needs_only_a_host_that_reaches_its_pool() -> None:
    full = PoolRoom("ceph", True, 10, 10, SSD)
    reaching = replace(host("hv-01"), storage_pools=(shared("ceph"),))
    elsewhere = replace(host("hv-02"), storage_pools=(local("ceph", 100),))  # a local pool of that name
    fleet = fleet_of(reaching, elsewhere)
    fleet.set_shared_pools({"ceph": full})
    vm = replace(request(), volumes=(VolumeAsk(50, SSD, stays_on="ceph"),))
    mask = StorageFilter().mask(fleet.columns, RequestVector.of(vm, context()))
    assert mask is not None
    assert mask.tolist() == [True, False]
    assert StorageFilter().reason(fleet, 1, RequestVector.of(vm, context())) == (
        "storage: volume 1 stays on shared pool ceph, not reached by the host"
    )
    assert decide(fleet, vm, context()).volumes == ("ceph",)


@settings(max_examples=200)
@given(pool_fleets(), VOLUMES, st.data())
def test_the_mask_equals_first_fit_host_by_host_also_after_bookings(
    made: tuple[list[HostState], dict[str, PoolRoom]], volumes: list[VolumeAsk], data: st.DataObject
) -> None:
    hosts, shared_pools = made
    fleet = fleet_of(*hosts)
    fleet.set_shared_pools(shared_pools)
    vm = replace(request(), volumes=tuple(volumes))
    for _ in range(3):
        mask = StorageFilter().mask(fleet.columns, RequestVector.of(vm, context()))
        assert mask is not None
        columns = fleet.columns
        expected = [assign_volumes(volumes, columns.storage.rooms(h)) is not None for h in columns.hosts]
        assert mask.tolist() == expected
        # Book some VM's volumes on some host, then ask again: the columns must follow.
        index = data.draw(st.integers(0, len(columns.hosts) - 1))
        chosen = columns.storage.assignment(index, volumes)
        if chosen is not None:
            fleet.allocate(columns.ids[index], vm.demand, per_pool(volumes, chosen))
