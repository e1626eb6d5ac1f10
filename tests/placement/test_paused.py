from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import host, request
from vmsched_placement.filters import PausedFilter


def test_paused_passes_a_host_taking_new_vms() -> None:
    assert passes(PausedFilter(), host(paused=False), request())


def test_paused_fails_a_host_under_maintenance() -> None:
    assert not passes(PausedFilter(), host(paused=True), request())
    assert reason(PausedFilter(), host(paused=True), request()) == "paused: scheduling paused"
