"""``server_group`` preferences: the soft policies of the VM's server group (Nova's soft weighers).

``soft-anti-affinity``: prefer the hosts whose domain holds the fewest of the group's members.
``soft-affinity``: prefer the hosts whose domain holds members (any host while the group has none).
A host in no domain (lacking the topology label) counts as a domain without members. Neither refuses
a host: when every eligible host is equally bad, the VM goes wherever the strategy says.
"""

from __future__ import annotations

import numpy as np

from vmsched_common.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_scheduler.placement.domains import codes_among, host_members, hosts_in, label_members
from vmsched_scheduler.placement.fleet import BoolArray, FleetColumns
from vmsched_scheduler.placement.model import RequestVector


class ServerGroupWeigher:
    NAME = "server_group"

    def narrow(self, columns: FleetColumns, request: RequestVector, eligible: BoolArray, count: int) -> int:
        group = request.group
        if group is None or sum(group.members.values()) == 0:
            return count
        if group.rule.policy is GroupPolicy.SOFT_ANTI_AFFINITY:
            return _fewest_members(columns, eligible, count, group.rule.topology_key == HOST_TOPOLOGY, request)
        if group.rule.policy is GroupPolicy.SOFT_AFFINITY:
            return _with_members(columns, eligible, count, group.rule.topology_key == HOST_TOPOLOGY, request)
        return count


def _fewest_members(
    columns: FleetColumns, eligible: BoolArray, count: int, by_host: bool, request: RequestVector
) -> int:
    group = request.group
    assert group is not None
    if by_host:
        rows, counts = host_members(columns, group)
        rows, counts = rows[eligible[rows]], counts[eligible[rows]]
        best = 0.0 if count > len(rows) else float(counts.min())  # an eligible host without members: 0
        dropped = rows[counts > best]
        eligible[dropped] = False
        return count - len(dropped)
    codes, table = label_members(columns, group)
    present = codes_among(codes, eligible, len(table))
    keep = np.equal(table, table[present].min())
    np.logical_and(eligible, hosts_in(codes, keep), out=eligible)
    return int(np.count_nonzero(eligible))


def _with_members(columns: FleetColumns, eligible: BoolArray, count: int, by_host: bool, request: RequestVector) -> int:
    group = request.group
    assert group is not None
    if by_host:
        rows, _ = host_members(columns, group)
        rows = rows[eligible[rows]]
        if len(rows):
            eligible.fill(False)
            eligible[rows] = True
        return len(rows) or count
    codes, table = label_members(columns, group)
    held = np.greater(table, 0.0)
    held[-1] = False
    together = hosts_in(codes, held)
    np.logical_and(together, eligible, out=together)
    found = int(np.count_nonzero(together))
    if found:
        np.copyto(eligible, together)
    return found or count
