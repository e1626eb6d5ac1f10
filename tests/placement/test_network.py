from __future__ import annotations

import numpy as np

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import RequestVector, decide
from vmsched_placement.filters import NetworkFilter


def test_network_passes_any_host_for_a_vm_that_needs_none() -> None:
    assert passes(NetworkFilter(), host(), request())
    assert NetworkFilter().mask(fleet_of(host()).columns, RequestVector.of(request(), context())) is None


def test_network_passes_a_host_that_reaches_every_network_asked() -> None:
    assert passes(NetworkFilter(), host(networks=["vlan-100", "vlan-200", "storage"]), request(networks=["vlan-100"]))
    assert passes(NetworkFilter(), host(networks=["vlan-100", "vlan-200"]), request(networks=["vlan-200", "vlan-100"]))


def test_network_fails_a_host_missing_one_and_names_the_missing_ones() -> None:
    lacking = host(networks=["vlan-100"])
    asked = request(networks=["vlan-100", "vlan-200", "storage"])
    assert not passes(NetworkFilter(), lacking, asked)
    assert reason(NetworkFilter(), lacking, asked) == "network: host does not reach storage, vlan-200"


def test_network_fails_a_host_that_reaches_none() -> None:
    assert not passes(NetworkFilter(), host(), request(networks=["vlan-100"]))


def test_network_is_judged_per_host_across_a_fleet_and_follows_updates() -> None:
    fleet = fleet_of(
        host("hv-1", networks=["a"]), host("hv-2", networks=["a", "b"]), host("hv-3"), host("hv-4", networks=["b"])
    )
    asked = RequestVector.of(request(networks=["b"]), context())
    mask = NetworkFilter().mask(fleet.columns, asked)
    assert mask is not None
    assert mask.tolist() == [False, True, False, True]
    fleet.upsert(host("hv-1", networks=["b"]))
    fleet.upsert(host("hv-0", networks=["a"]))
    fleet.remove("hv-4")
    mask = NetworkFilter().mask(fleet.columns, asked)
    assert mask is not None
    assert np.flatnonzero(mask).tolist() == [1, 2]


def test_a_vm_whose_network_no_host_reaches_is_unschedulable_for_network() -> None:
    fleet = fleet_of(host("hv-1", networks=["a"]), host("hv-2", networks=["a"]))
    decision = decide(fleet, request(networks=["b"]), context())
    assert decision.host_id is None
    assert decision.reason == "network"
    assert decision.rejections == {"network": 2}
    assert decide(fleet, request(networks=["a"]), context()).host_id == "hv-1"
