"""The preference step: soft rules (weighers) order the eligible hosts and never reject."""

from __future__ import annotations

from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import Taint, decide, explain

SOFT = Taint("dedicated", "ml", "PreferNoSchedule")


def test_a_vm_without_gpus_avoids_gpu_hosts_while_another_host_fits() -> None:
    fleet = fleet_of(host("hv-01", gpu=4), host("hv-02", used_cpu=12))
    decision = decide(fleet, request(cpu=2), context())
    assert decision.host_id == "hv-02"  # busier, but least_loaded ranks only the preferred hosts
    assert dict(decision.preferences) == {"gpu_affinity": 1}
    assert (decision.eligible, decision.preferred) == (2, 1)


def test_a_preference_never_makes_a_vm_unschedulable() -> None:
    fleet = fleet_of(host("hv-01", gpu=4, taints=[SOFT]), host("hv-02", cpu=1))
    decision = decide(fleet, request(cpu=2), context())
    assert decision.host_id == "hv-01"
    assert dict(decision.preferences) == {"taints": 1, "gpu_affinity": 1}
    assert dict(decision.rejections) == {"cpu": 1}


def test_the_least_penalised_hosts_win_when_every_host_is_penalised() -> None:
    fleet = fleet_of(host("hv-01", gpu=4, taints=[SOFT]), host("hv-02", gpu=1, used_cpu=15))
    assert decide(fleet, request(cpu=1), context()).host_id == "hv-02"


def test_explain_names_the_preferences_of_each_passing_host() -> None:
    fleet = fleet_of(host("hv-01", gpu=2, taints=[SOFT]), host("hv-02"))
    verdicts = {v.host_id: v for v in explain(fleet, request(), context())}
    assert verdicts["hv-01"].penalties == (
        "taints: host has dedicated=ml:PreferNoSchedule, not tolerated",
        "gpu_affinity: host has 2 GPUs, the VM asks for none",
    )
    assert verdicts["hv-02"].penalties == ()
