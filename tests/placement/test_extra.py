from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, extra_maps, fleet_of, host, host_states, request
from vmsched_placement import Fleet, HostState, RequestVector
from vmsched_placement.filters import ExtraFilter
from vmsched_placement.model import Demand, Extras

FPGA_HOST = host(extra={"fpga": 2, "nic": 4}, used_extra={"fpga": 1})


def test_extra_passes_every_host_when_the_vm_asks_for_none() -> None:
    assert ExtraFilter().mask(fleet_of(FPGA_HOST).columns, RequestVector.of(request(), context())) is None


def test_extra_passes_a_host_with_enough_of_every_name_asked_for() -> None:
    assert passes(ExtraFilter(), FPGA_HOST, request(extra={"fpga": 1, "nic": 4}))


def test_extra_fails_a_host_short_of_one_name_with_the_numbers() -> None:
    req = request(extra={"fpga": 2})
    assert not passes(ExtraFilter(), FPGA_HOST, req)
    assert reason(ExtraFilter(), FPGA_HOST, req) == "extra: needs 2 fpga, 1 fpga free (2 fpga total, 1 fpga allocated)"


def test_extra_fails_a_host_that_reports_none_of_the_name() -> None:
    req = request(extra={"ssd-cache": 1})
    assert not passes(ExtraFilter(), FPGA_HOST, req)
    assert (
        reason(ExtraFilter(), FPGA_HOST, req)
        == "extra: needs 1 ssd-cache, 0 ssd-cache free (0 ssd-cache total, 0 ssd-cache allocated)"
    )


def test_extra_follows_allocations_booked_on_the_fleet() -> None:
    fleet = fleet_of(FPGA_HOST)
    vector = RequestVector.of(request(extra={"fpga": 1}), context())

    def fits() -> bool:
        mask = ExtraFilter().mask(fleet.columns, vector)
        assert mask is not None
        return bool(mask[0])

    assert fits()
    fleet.allocate(FPGA_HOST.id, Demand(0, 0, 0, 0, (("fpga", 1),)))
    assert not fits()
    fleet.release(FPGA_HOST.id, Demand(0, 0, 0, 0, (("fpga", 1),)))
    assert fits()


@settings(deadline=None)
@given(st.lists(host_states(), max_size=20), extra_maps, st.lists(host_states(), max_size=3))
def test_the_mask_equals_the_per_host_rule(hosts: list[HostState], asked: Extras, later: list[HostState]) -> None:
    fleet = Fleet.from_hosts(hosts)
    vector = RequestVector.of(request(extra=dict(asked)), context())
    ExtraFilter().mask(fleet.columns, vector)  # the columns exist from here on, and must follow updates
    fleet.upsert_many(later)
    mask = ExtraFilter().mask(fleet.columns, vector)
    expected = [
        all(dict(h.capacity.extra).get(n, 0) - dict(h.allocated.extra).get(n, 0) >= c for n, c in asked) for h in fleet
    ]
    assert (mask is None) == (not asked)
    assert [bool(v) for v in (mask if mask is not None else expected)] == expected
    for index, ok in enumerate(expected):
        if not ok:
            assert ExtraFilter().reason(fleet, index, vector).startswith("extra: needs ")
