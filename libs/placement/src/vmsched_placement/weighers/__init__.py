"""The weighers: soft rules, applied among the hosts that pass every filter (see ``base.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from vmsched_placement.weighers.base import HostWeigher
from vmsched_placement.weighers.gpu_affinity import GpuAffinityWeigher
from vmsched_placement.weighers.server_group import ServerGroupWeigher
from vmsched_placement.weighers.taints import PreferNoScheduleWeigher

WEIGHERS: tuple[HostWeigher, ...] = (PreferNoScheduleWeigher(), GpuAffinityWeigher(), ServerGroupWeigher())
WEIGHERS_BY_NAME: Mapping[str, HostWeigher] = MappingProxyType({w.NAME: w for w in WEIGHERS})
WEIGHER_NAMES: tuple[str, ...] = tuple(w.NAME for w in WEIGHERS)

__all__ = [
    "WEIGHERS",
    "WEIGHERS_BY_NAME",
    "WEIGHER_NAMES",
    "GpuAffinityWeigher",
    "HostWeigher",
    "PreferNoScheduleWeigher",
    "ServerGroupWeigher",
]
