"""A server group's domains over the fleet's columns: which domain each host is in, and how many of
the group's members that domain holds (what the group filters and weigher read).

A domain is a host (topology key ``host``) or a value of a host label; the label's value column is the
fleet's (:meth:`FleetColumns.label_column`), so a decision costs one gather over the hosts, whatever
the number of members.
"""

from __future__ import annotations

import numpy as np

from vmsched_common.groups import HOST_TOPOLOGY
from vmsched_scheduler.placement.fleet import NO_LABEL, BoolArray, FleetColumns, FloatArray
from vmsched_scheduler.placement.model import PlacementGroup


def members_per_host(columns: FleetColumns, group: PlacementGroup) -> tuple[FloatArray, BoolArray | None]:
    """Per host, the group's members in the host's domain; and which hosts are in a domain at all
    (None: every host, when each host is a domain of its own)."""
    key = group.rule.topology_key
    if key == HOST_TOPOLOGY:
        counts = np.zeros(len(columns), dtype=np.float64)
        for host_id, members in group.members.items():
            index = columns.index_of(host_id)
            if index is not None:
                counts[index] = members
        return counts, None
    codes, values = columns.label_column(key)
    # One slot per value seen, and a last one that stays 0: NO_LABEL (-1) gathers from it.
    table = np.zeros(len(values) + 1, dtype=np.float64)
    for domain, members in group.members.items():
        code = values.get(domain)
        if code is not None:
            table[code] = members
    in_domain: BoolArray = np.not_equal(codes, NO_LABEL)
    return table[codes], in_domain


def domain_names(columns: FleetColumns, key: str, hosts: BoolArray) -> list[str]:
    """The domains of the hosts in ``hosts`` (sorted; hosts in no domain add none)."""
    if key == HOST_TOPOLOGY:
        return [columns.ids[index] for index in np.flatnonzero(hosts).tolist()]
    codes, values = columns.label_column(key)
    present = set(np.unique(codes[hosts]).tolist())
    return sorted(value for value, code in values.items() if code in present)
