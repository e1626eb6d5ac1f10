from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import RequestVector
from vmsched_placement.filters import HaReserveFilter
from vmsched_placement.model import FailoverReserve

ROOM = FailoverReserve(1, {"z1": (4, 8192, 100, 0), "": (1, 8192, 100, 0)})


def test_ha_reserve_passes_a_host_whose_zone_keeps_room_after_the_vm() -> None:
    assert passes(HaReserveFilter(), host(labels={"zone": "z1"}), request(cpu=4, reserve=ROOM))
    assert passes(HaReserveFilter(), host(), request(cpu=4))  # no reserve kept: no constraint


def test_ha_reserve_fails_a_host_whose_zone_would_be_left_unable_to_restart_its_largest_host() -> None:
    assert not passes(HaReserveFilter(), host(labels={"zone": "z1"}), request(cpu=5, reserve=ROOM))
    assert reason(HaReserveFilter(), host(labels={"zone": "z1"}), request(cpu=5, reserve=ROOM)) == (
        "ha_reserve: needs 5 cpu, zone z1 keeps room to restart the VMs of its 1 largest host(s) and has 4 to spare"
    )


def test_ha_reserve_weighs_the_hosts_without_a_zone_as_one_zone_and_an_unknown_zone_has_no_room() -> None:
    fleet = fleet_of(host("a", labels={"zone": "z1"}), host("b"), host("c", labels={"zone": "z9"}))
    mask = HaReserveFilter().mask(fleet.columns, RequestVector.of(request(cpu=2, reserve=ROOM), context()))
    assert mask is not None
    assert mask.tolist() == [True, False, False]  # z1 has 4 to spare; no zone 1; z9 none counted


def test_ha_reserve_does_not_check_a_resource_the_vm_asks_none_of() -> None:
    short_of_gpus = FailoverReserve(1, {"": (4, 8192, 100, -1)})
    assert passes(HaReserveFilter(), host(), request(cpu=1, gpu=0, reserve=short_of_gpus))
