from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import RequestVector, Taint, Toleration
from vmsched_placement.filters import TaintsFilter

GPU = Taint("gpu", "true", "NoSchedule")
SPOT = Taint("spot", "", "NoSchedule")
SOFT = Taint("dedicated", "ml", "PreferNoSchedule")


def test_taints_passes_an_untainted_host() -> None:
    assert passes(TaintsFilter(), host(), request())


def test_taints_fails_a_noschedule_host_for_a_vm_without_tolerations_and_names_the_taint() -> None:
    tainted = host(taints=[GPU])
    assert not passes(TaintsFilter(), tainted, request())
    assert reason(TaintsFilter(), tainted, request()) == "taints: host has gpu=true:NoSchedule, not tolerated"


def test_taints_passes_a_host_whose_every_noschedule_taint_is_tolerated() -> None:
    tolerant = request(tolerations=[Toleration("gpu", "Equal", "true", "NoSchedule"), Toleration("spot", "Exists")])
    assert passes(TaintsFilter(), host(taints=[GPU, SPOT]), tolerant)


def test_taints_fails_when_one_taint_is_not_tolerated_and_names_only_that_one() -> None:
    only_gpu = request(tolerations=[Toleration("gpu", "Equal", "true")])
    assert not passes(TaintsFilter(), host(taints=[GPU, SPOT]), only_gpu)
    assert (
        reason(TaintsFilter(), host(taints=[GPU, SPOT]), only_gpu) == "taints: host has spot:NoSchedule, not tolerated"
    )


def test_taints_follows_kubernetes_matching() -> None:
    tainted = host(taints=[GPU])
    assert not passes(TaintsFilter(), tainted, request(tolerations=[Toleration("gpu", "Equal", "false")]))
    assert not passes(
        TaintsFilter(), tainted, request(tolerations=[Toleration("gpu", "Exists", effect="PreferNoSchedule")])
    )
    assert passes(TaintsFilter(), tainted, request(tolerations=[Toleration("gpu", "Exists")]))
    assert passes(TaintsFilter(), tainted, request(tolerations=[Toleration("", "Exists")]))  # tolerates everything


def test_taints_ignores_prefer_no_schedule_taints() -> None:
    assert passes(TaintsFilter(), host(taints=[SOFT]), request())


def test_taints_costs_nothing_on_a_fleet_without_noschedule_taints() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-02", taints=[SOFT]))
    vector = RequestVector.of(request(tolerations=[Toleration("gpu", "Exists")]), context())
    assert TaintsFilter().mask(fleet.columns, vector) is None


def test_taints_mask_follows_hosts_as_they_change() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-02", taints=[GPU]), host("hv-03", taints=[GPU]))
    vector = RequestVector.of(request(), context())
    assert list(TaintsFilter().mask(fleet.columns, vector)) == [True, False, False]  # type: ignore[arg-type]
    fleet.upsert(host("hv-02"))
    fleet.remove("hv-03")
    fleet.upsert(host("hv-00", taints=[GPU]))
    assert list(TaintsFilter().mask(fleet.columns, vector)) == [False, True, True]  # type: ignore[arg-type]
    fleet.upsert(host("hv-00"))
    assert TaintsFilter().mask(fleet.columns, vector) is None
