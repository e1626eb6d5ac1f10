from __future__ import annotations

import pytest

from tests.placement.filter_checks import passes, reason
from tests.placement.support import TIMEOUT, host, request
from vmsched_placement.filters import OfflineFilter


def test_offline_passes_an_online_host_with_a_recent_heartbeat() -> None:
    assert passes(OfflineFilter(), host(heartbeat_age=2.0), request())


def test_offline_passes_a_host_whose_heartbeat_is_exactly_the_timeout_old() -> None:
    assert passes(OfflineFilter(), host(heartbeat_age=TIMEOUT), request())


def test_offline_fails_a_host_whose_heartbeat_is_too_old() -> None:
    stale = host(heartbeat_age=42.0)
    assert not passes(OfflineFilter(), stale, request())
    assert reason(OfflineFilter(), stale, request()) == "offline: last heartbeat 42s ago (timeout 15s)"


@pytest.mark.parametrize("status", ["draining", "offline", "unsynced"])
def test_offline_fails_a_host_that_is_not_online(status: str) -> None:
    assert not passes(OfflineFilter(), host(status=status), request())
    assert reason(OfflineFilter(), host(status=status), request()) == f"offline: status {status}"
