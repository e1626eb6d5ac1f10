from __future__ import annotations

from tests.placement.support import host
from tests.placement.weigher_checks import penalised
from vmsched_placement import Taint, Toleration
from vmsched_placement.weighers import PreferNoScheduleWeigher

SOFT = Taint("dedicated", "ml", "PreferNoSchedule")


def test_prefer_no_schedule_penalises_hosts_with_an_untolerated_soft_taint() -> None:
    hosts = (host("hv-01"), host("hv-02", taints=[SOFT]))
    assert penalised(PreferNoScheduleWeigher(), *hosts) == [False, True]
    assert penalised(PreferNoScheduleWeigher(), *hosts, tolerations=[Toleration("dedicated", "Exists")]) == [
        False,
        False,
    ]


def test_prefer_no_schedule_has_no_opinion_without_soft_taints() -> None:
    assert (
        penalised(PreferNoScheduleWeigher(), host("hv-01"), host("hv-02", taints=[Taint("gpu", "", "NoSchedule")]))
        is None
    )
