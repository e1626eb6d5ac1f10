"""The HA reserve's arithmetic (vmsched_domain.ha_reserve) against the obvious model: after placing a
VM, every set of N hosts of its zone may fail and the others still take their restartable VMs."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st

from vmsched_domain.ha_reserve import NO_ZONE, Amounts, ReserveHost, headroom, shortfall


def host(host_id: str, effective: int, allocated: int, unrestartable: int = 0, zone: str = NO_ZONE) -> ReserveHost:
    return ReserveHost(host_id, zone, (effective, 0, 0, 0), (allocated, 0, 0, 0), (unrestartable, 0, 0, 0))


def tolerates(hosts: list[ReserveHost], lost: int, row: int = 0) -> bool:
    """Every ``lost`` hosts may fail: the others' free room takes their restartable VMs."""
    for failed in combinations(range(len(hosts)), min(lost, len(hosts))):
        survivors = sum(h.effective[row] - h.allocated[row] for i, h in enumerate(hosts) if i not in failed)
        restarts = sum(hosts[i].allocated[row] - hosts[i].unrestartable[row] for i in failed)
        if survivors < restarts:
            return False
    return True


def placed(hosts: list[ReserveHost], index: int, demand: int) -> list[ReserveHost]:
    """The hosts once a restartable VM of ``demand`` vCPUs is on host ``index``."""
    target = hosts[index]
    moved = ReserveHost(
        target.host_id, target.zone, target.effective, (target.allocated[0] + demand, 0, 0, 0), target.unrestartable
    )
    return [moved if i == index else h for i, h in enumerate(hosts)]


def test_three_hosts_of_8_keep_one_hosts_worth_free() -> None:
    hosts = [host("a", 8, 6), host("b", 8, 6), host("c", 8, 4)]  # 16 allocated, 8 free
    assert headroom(hosts, 1) == {NO_ZONE: (0, 0, 0, 0)}
    assert shortfall((2, 0, 0, 0), headroom(hosts, 1)[NO_ZONE]) == 0  # the next 2-vCPU VM is refused


def test_vms_that_never_restart_need_no_room() -> None:
    hosts = [host("a", 8, 6, unrestartable=6), host("b", 8, 6, unrestartable=6), host("c", 8, 4, unrestartable=4)]
    assert headroom(hosts, 1)[NO_ZONE][0] == 4  # free 8, minus the largest host's restartable room 4


def test_each_zone_keeps_its_own_room() -> None:
    hosts = [host("a", 8, 0, zone="z1"), host("b", 8, 0, zone="z1"), host("c", 8, 0, zone="z2")]
    rooms = headroom(hosts, 1)
    assert rooms == {"z1": (8, 0, 0, 0), "z2": (0, 0, 0, 0)}  # a zone of one host cannot restart it anywhere


hosts_strategy = st.lists(
    st.tuples(st.integers(1, 32), st.integers(0, 32), st.integers(0, 32)).map(
        lambda t: (t[0], min(t[1], t[0]), min(t[2], t[1], t[0]))
    ),
    min_size=1,
    max_size=6,
)


@given(spec=hosts_strategy, lost=st.integers(0, 3), demand=st.integers(1, 16), data=st.data())
def test_a_vm_fits_the_headroom_exactly_when_every_loss_of_n_hosts_is_survivable_after_it(
    spec: list[tuple[int, int, int]], lost: int, demand: int, data: st.DataObject
) -> None:
    hosts = [host(f"h{i}", effective, allocated, never) for i, (effective, allocated, never) in enumerate(spec)]
    room: Amounts = headroom(hosts, lost)[NO_ZONE]
    index = data.draw(st.integers(0, len(hosts) - 1))
    assert (room[0] >= demand) == tolerates(placed(hosts, index, demand), lost)
    assert (room[0] >= 0) == tolerates(hosts, lost)
