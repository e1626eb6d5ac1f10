from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import RequestVector
from vmsched_placement.filters import ExcludedFilter


def test_excluded_passes_a_host_not_in_the_exclude_list() -> None:
    assert passes(ExcludedFilter(), host("hv-01"), request(exclude=["hv-02"]))


def test_excluded_passes_every_host_when_nothing_is_excluded() -> None:
    assert passes(ExcludedFilter(), host("hv-01"), request())


def test_excluded_fails_a_host_that_already_failed_this_vm() -> None:
    assert not passes(ExcludedFilter(), host("hv-01"), request(exclude=["hv-01"]))
    assert reason(ExcludedFilter(), host("hv-01"), request(exclude=["hv-01"])) == "excluded: excluded on retry"


def test_excluded_ignores_ids_the_fleet_does_not_know() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-03"))
    mask = ExcludedFilter().mask(fleet.columns, RequestVector.of(request(exclude=["hv-02", "hv-03"]), context()))
    assert mask is not None
    assert mask.tolist() == [True, False]
