"""``server_group``: the soft policies of the VM's server group (Nova's soft weighers).

``soft-anti-affinity``: a host's penalty is how many of the group's members its domain holds, so the
emptiest domains are preferred. ``soft-affinity``: a host whose domain holds none of the members is
penalised (nothing is, while the group has no members). A host in no domain (lacking the topology
label) counts as a domain without members. Neither refuses a host: when every eligible host is
equally bad, the VM goes wherever the strategy says.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_placement.domains import host_members, hosts_in, label_members
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns, FloatArray
from vmsched_placement.model import RequestVector

_SOFT = (GroupPolicy.SOFT_ANTI_AFFINITY, GroupPolicy.SOFT_AFFINITY)


class ServerGroupWeigher:
    NAME = "server_group"

    def penalty(self, columns: FleetColumns, request: RequestVector) -> BoolArray | FloatArray | None:
        group = request.group
        if group is None or group.rule.policy not in _SOFT or sum(group.members.values()) == 0:
            return None
        by_host = group.rule.topology_key == HOST_TOPOLOGY
        if group.rule.policy is GroupPolicy.SOFT_ANTI_AFFINITY:
            if by_host:
                rows, counts = host_members(columns, group)
                members = np.zeros(len(columns), dtype=np.float64)
                members[rows] = counts
                return members
            codes, table = label_members(columns, group)
            per_host: FloatArray = np.take(table, codes)  # code -1 takes the last slot, 0
            return per_host
        if by_host:
            rows, _ = host_members(columns, group)
            away = np.ones(len(columns), dtype=np.bool_)
            away[rows] = False
            return away
        codes, table = label_members(columns, group)
        held = np.greater(table, 0.0)
        held[-1] = False
        return ~hosts_in(codes, held)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        group = request.group
        assert group is not None
        key = group.rule.topology_key
        host = fleet.host_at(index)
        domain = host.id if key == HOST_TOPOLOGY else host.labels.get(key)
        held = 0 if domain is None else group.members.get(domain, 0)
        where = "no domain" if domain is None else f"{key} {domain}"
        if group.rule.policy is GroupPolicy.SOFT_ANTI_AFFINITY:
            return f"server_group: soft-anti-affinity, {where} holds {held} member{'s' if held != 1 else ''}"
        return f"server_group: soft-affinity, {where} holds none of the group's members"
