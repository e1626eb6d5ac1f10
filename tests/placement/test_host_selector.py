from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.filter_checks import passes, reason
from tests.placement.support import (
    context,
    fleet_of,
    host,
    host_selectors,
    host_states,
    reference_term_holds,
    request,
    term,
)
from vmsched_placement import Fleet, HostState, RequestVector, SelectorTerm
from vmsched_placement.filters import HostSelectorFilter

ZONE_Z3 = host(labels={"zone": "z3", "rack": "r7"})


def test_host_selector_passes_every_host_when_the_vm_has_none() -> None:
    assert HostSelectorFilter().mask(fleet_of(ZONE_Z3).columns, RequestVector.of(request(), context())) is None


def test_in_passes_a_host_with_one_of_the_values() -> None:
    assert passes(HostSelectorFilter(), ZONE_Z3, request(host_selector=[term("zone", "In", "z1", "z3")]))


def test_in_fails_a_host_with_another_value_and_says_which() -> None:
    req = request(host_selector=[term("zone", "In", "z1", "z2")])
    assert not passes(HostSelectorFilter(), ZONE_Z3, req)
    assert reason(HostSelectorFilter(), ZONE_Z3, req) == "host_selector: zone In [z1, z2] (host has zone=z3)"


def test_in_fails_a_host_without_the_key() -> None:
    req = request(host_selector=[term("gpu-model", "In", "a100")])
    assert not passes(HostSelectorFilter(), ZONE_Z3, req)
    assert reason(HostSelectorFilter(), ZONE_Z3, req) == "host_selector: gpu-model In [a100] (host has no gpu-model)"


def test_not_in_passes_a_host_with_another_value_or_without_the_key() -> None:
    assert passes(HostSelectorFilter(), ZONE_Z3, request(host_selector=[term("zone", "NotIn", "z1")]))
    assert passes(HostSelectorFilter(), ZONE_Z3, request(host_selector=[term("gpu-model", "NotIn", "a100")]))


def test_not_in_fails_a_host_with_one_of_the_values() -> None:
    req = request(host_selector=[term("zone", "NotIn", "z2", "z3")])
    assert not passes(HostSelectorFilter(), ZONE_Z3, req)
    assert reason(HostSelectorFilter(), ZONE_Z3, req) == "host_selector: zone NotIn [z2, z3] (host has zone=z3)"


def test_exists_passes_a_host_with_the_key_and_fails_one_without() -> None:
    assert passes(HostSelectorFilter(), ZONE_Z3, request(host_selector=[term("rack", "Exists")]))
    req = request(host_selector=[term("gpu-model", "Exists")])
    assert not passes(HostSelectorFilter(), ZONE_Z3, req)
    assert reason(HostSelectorFilter(), ZONE_Z3, req) == "host_selector: gpu-model Exists (host has no gpu-model)"


def test_does_not_exist_passes_a_host_without_the_key_and_fails_one_with() -> None:
    assert passes(HostSelectorFilter(), ZONE_Z3, request(host_selector=[term("gpu-model", "DoesNotExist")]))
    req = request(host_selector=[term("rack", "DoesNotExist")])
    assert not passes(HostSelectorFilter(), ZONE_Z3, req)
    assert reason(HostSelectorFilter(), ZONE_Z3, req) == "host_selector: rack DoesNotExist (host has rack=r7)"


def test_every_term_must_hold_and_the_reason_names_each_that_fails() -> None:
    req = request(host_selector=[term("zone", "In", "z3"), term("rack", "NotIn", "r7"), term("ssd", "Exists")])
    assert not passes(HostSelectorFilter(), ZONE_Z3, req)
    assert reason(HostSelectorFilter(), ZONE_Z3, req) == (
        "host_selector: rack NotIn [r7] (host has rack=r7); ssd Exists (host has no ssd)"
    )


def test_in_with_many_values_matches_as_with_few() -> None:
    many = [f"z{n}" for n in range(10)]
    fleet = fleet_of(*(host(f"hv-{n}", labels={"zone": f"z{n}"}) for n in range(12)))
    mask = HostSelectorFilter().mask(
        fleet.columns, RequestVector.of(request(host_selector=[term("zone", "In", *many)]), context())
    )
    assert mask is not None
    assert [fleet.host_at(i).labels["zone"] for i in range(len(fleet)) if mask[i]] == many


def test_the_mask_follows_a_host_whose_labels_change() -> None:
    fleet = fleet_of(host("hv-1", labels={"zone": "z1"}), host("hv-2", labels={}))
    vector = RequestVector.of(request(host_selector=[term("zone", "In", "z2")]), context())

    def passing() -> list[bool]:
        mask = HostSelectorFilter().mask(fleet.columns, vector)
        assert mask is not None
        return [bool(passed) for passed in mask]

    assert passing() == [False, False]
    fleet.upsert(host("hv-2", labels={"zone": "z2"}))
    assert passing() == [False, True]


@settings(deadline=None)
@given(st.lists(host_states(), max_size=20), host_selectors, st.data())
def test_the_mask_equals_the_per_host_reference(
    hosts: list[HostState], selector: tuple[SelectorTerm, ...], data: st.DataObject
) -> None:
    fleet = Fleet.from_hosts(hosts)
    # A fleet that has already answered other questions (interned keys and values) answers the same.
    for warm_up in data.draw(st.lists(host_selectors, max_size=2)):
        HostSelectorFilter().mask(fleet.columns, RequestVector.of(request(host_selector=warm_up), context()))
    vector = RequestVector.of(request(host_selector=selector), context())
    mask = HostSelectorFilter().mask(fleet.columns, vector)
    expected = [all(reference_term_holds(t, h.labels) for t in selector) for h in fleet]
    assert (mask is None) == (not selector)
    assert list(mask if mask is not None else expected) == expected
    for index, ok in enumerate(expected):
        if not ok:
            why = HostSelectorFilter().reason(fleet, index, vector)
            assert why.startswith("host_selector: ")
            failed = [t for t in selector if not reference_term_holds(t, fleet.host_at(index).labels)]
            assert why.count("(host has ") == len(failed)
