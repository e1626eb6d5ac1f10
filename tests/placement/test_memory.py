from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import host, request
from vmsched_placement.filters import MemoryFilter


def test_memory_passes_when_enough_mib_are_free() -> None:
    assert passes(MemoryFilter(), host(memory_mb=32768, used_memory_mb=24576), request(memory_mb=8192))


def test_memory_passes_with_overcommit() -> None:
    assert passes(
        MemoryFilter(), host(memory_mb=32768, used_memory_mb=32768, memory_ratio=1.5), request(memory_mb=8192)
    )


def test_memory_fails_when_too_little_is_free() -> None:
    full = host(memory_mb=32768, used_memory_mb=30720)
    assert not passes(MemoryFilter(), full, request(memory_mb=8192))
    assert reason(MemoryFilter(), full, request(memory_mb=8192)) == (
        "memory: needs 8192 MiB, 2048 MiB free (32768 MiB total, 30720 MiB allocated)"
    )
