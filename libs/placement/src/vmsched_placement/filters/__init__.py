"""The placement filters, in the order they run. A host's rejection is the first filter it fails."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from vmsched_placement.filters.base import HostFilter
from vmsched_placement.filters.cpu import CpuFilter
from vmsched_placement.filters.dedicated import DedicatedFilter
from vmsched_placement.filters.disk import DiskFilter
from vmsched_placement.filters.excluded import ExcludedFilter
from vmsched_placement.filters.extra import ExtraFilter
from vmsched_placement.filters.gpu import GpuFilter
from vmsched_placement.filters.ha_reserve import HaReserveFilter
from vmsched_placement.filters.host_selector import HostSelectorFilter
from vmsched_placement.filters.labels import LabelsFilter
from vmsched_placement.filters.memory import MemoryFilter
from vmsched_placement.filters.migration import MigrationFilter
from vmsched_placement.filters.network import NetworkFilter
from vmsched_placement.filters.offline import OfflineFilter
from vmsched_placement.filters.paused import PausedFilter
from vmsched_placement.filters.server_group import ServerGroupFilter
from vmsched_placement.filters.spread import SpreadFilter
from vmsched_placement.filters.storage import StorageFilter
from vmsched_placement.filters.taints import TaintsFilter

# The host's gates first (excluded, migration, offline, paused, dedicated: a host given to another
# project, whatever the VM tolerates), then what the VM asks of a host, its labels,
# host selector and the host's taints before the amounts of resources (as Kubernetes runs
# NodeAffinity and TaintToleration before NodeResourcesFit): a host that could never take this VM
# is counted as such, not as "full". The order is also the
# order of rejection keys, and the last rule that rejected a host is an unschedulable VM's reason.
# A server group's anti-affinity and affinity say where a VM may go, as labels do; its spread comes
# last, as it weighs the domains of the hosts that pass every other filter. The HA reserve comes after
# the amounts a host has free: a host too full for the VM is "full", not "kept for failover".
_BEFORE_SPREAD: tuple[HostFilter, ...] = (
    ExcludedFilter(),
    MigrationFilter(),
    OfflineFilter(),
    PausedFilter(),
    DedicatedFilter(),
    LabelsFilter(),
    HostSelectorFilter(),
    TaintsFilter(),
    NetworkFilter(),
    ServerGroupFilter(),
    CpuFilter(),
    MemoryFilter(),
    DiskFilter(),
    GpuFilter(),
    ExtraFilter(),
    StorageFilter(),
    HaReserveFilter(),
)
SPREAD_FILTER = SpreadFilter(_BEFORE_SPREAD)
FILTERS: tuple[HostFilter, ...] = (*_BEFORE_SPREAD, SPREAD_FILTER)
FILTERS_BY_NAME: Mapping[str, HostFilter] = MappingProxyType({f.NAME: f for f in FILTERS})
FILTER_NAMES: tuple[str, ...] = tuple(f.NAME for f in FILTERS)
AVAILABILITY_FILTER = OfflineFilter.NAME  # no host passing it means "no_available_agents"

__all__ = [
    "AVAILABILITY_FILTER",
    "FILTERS",
    "FILTERS_BY_NAME",
    "FILTER_NAMES",
    "SPREAD_FILTER",
    "CpuFilter",
    "DedicatedFilter",
    "DiskFilter",
    "ExcludedFilter",
    "ExtraFilter",
    "GpuFilter",
    "HaReserveFilter",
    "HostFilter",
    "HostSelectorFilter",
    "LabelsFilter",
    "MemoryFilter",
    "MigrationFilter",
    "NetworkFilter",
    "OfflineFilter",
    "PausedFilter",
    "ServerGroupFilter",
    "SpreadFilter",
    "StorageFilter",
    "TaintsFilter",
]
