from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import host, request
from vmsched_placement.filters import DiskFilter


def test_disk_passes_when_enough_gb_are_free() -> None:
    assert passes(DiskFilter(), host(disk_gb=500, used_disk_gb=400), request(disk_gb=100))


def test_disk_fails_when_too_little_is_free() -> None:
    full = host(disk_gb=500, used_disk_gb=480)
    assert not passes(DiskFilter(), full, request(disk_gb=50))
    assert reason(DiskFilter(), full, request(disk_gb=50)) == (
        "disk: needs 50 GB, 20 GB free (500 GB total, 480 GB allocated)"
    )
