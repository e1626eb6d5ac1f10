from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import RequestVector, Taint, Toleration, decide
from vmsched_placement.filters import DedicatedFilter


def test_dedicated_passes_an_undedicated_host_for_an_ordinary_vm() -> None:
    assert passes(DedicatedFilter(), host(), request(project="p1"))
    # A fleet without dedicated hosts sets no constraint on ordinary VMs: no pass over the hosts.
    assert DedicatedFilter().mask(fleet_of(host()).columns, RequestVector.of(request(), context())) is None


def test_dedicated_passes_a_host_dedicated_to_the_vms_project_whether_it_asks_or_not() -> None:
    mine = host(dedicated_to="p1")
    assert passes(DedicatedFilter(), mine, request(project="p1"))
    assert passes(DedicatedFilter(), mine, request(project="p1", dedicated=True))


def test_dedicated_fails_a_host_dedicated_to_another_project_and_names_both() -> None:
    theirs = host(dedicated_to="p2")
    assert not passes(DedicatedFilter(), theirs, request(project="p1"))
    assert (
        reason(DedicatedFilter(), theirs, request(project="p1"))
        == "dedicated: host dedicated to project p2, the VM is of project p1"
    )


def test_dedicated_fails_an_undedicated_host_for_a_vm_asking_for_a_dedicated_one() -> None:
    asked = request(project="p1", dedicated=True)
    assert not passes(DedicatedFilter(), host(), asked)
    assert reason(DedicatedFilter(), host(), asked) == (
        "dedicated: the VM asks for a host dedicated to project p1; this one is not dedicated"
    )


def test_no_toleration_opens_a_host_dedicated_to_another_project() -> None:
    # A token may add any toleration: dedication is not a taint.
    tainted = host(dedicated_to="p2", taints=[Taint("dedicated", "p2", "NoSchedule")])
    tolerant = request(project="p1", tolerations=[Toleration("", "Exists")])
    decision = decide(fleet_of(tainted), tolerant, context())
    assert (decision.host_id, decision.reason) == (None, "dedicated")


def test_a_dedicated_vm_goes_to_its_projects_host_and_others_keep_off_it() -> None:
    fleet = fleet_of(host("hv-1", dedicated_to="p1"), host("hv-2"), host("hv-3", dedicated_to="p2"))
    assert decide(fleet, request(project="p1", dedicated=True), context()).ranked == ("hv-1",)
    assert set(decide(fleet, request(project="p1"), context()).ranked) == {"hv-1", "hv-2"}
    assert decide(fleet, request(project="p3"), context()).ranked == ("hv-2",)
    nowhere = decide(fleet, request(project="p3", dedicated=True), context())
    assert (nowhere.reason, dict(nowhere.rejections)) == ("dedicated", {"dedicated": 3})
    fleet.upsert(host("hv-2", dedicated_to="p3"))
    assert decide(fleet, request(project="p3", dedicated=True), context()).host_id == "hv-2"
