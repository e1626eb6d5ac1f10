"""``server_group``: the hard policies ``anti-affinity`` and ``affinity`` of the VM's server group.

``anti-affinity``: the host's domain holds fewer than ``max_per_domain`` of the group's members.
``affinity``: the host's domain holds members, or the group has none yet (the first fixes the domain).
A host in no domain (lacking the topology label) takes no member. The rule is
:func:`vmsched_domain.groups.refuses`; the counts are the request's (the snapshot's, plus the round's
own choices so far).
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_domain.groups import domain_of, refusal
from vmsched_placement.domains import host_members, hosts_in, label_members
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class ServerGroupFilter:
    NAME = "server_group"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        group = request.group
        if group is None:
            return None
        rule = group.rule
        anti = rule.policy is GroupPolicy.ANTI_AFFINITY
        if not anti and rule.policy is not GroupPolicy.AFFINITY:
            return None
        anywhere = sum(group.members.values()) > 0
        if rule.topology_key == HOST_TOPOLOGY:
            if not anti and not anywhere:
                return None  # no member yet, every host a domain: any host will do
            rows, counts = host_members(columns, group)
            if anti:
                passes = np.ones(len(columns), dtype=np.bool_)
                passes[rows[counts >= rule.max_per_domain]] = False
            else:
                passes = np.zeros(len(columns), dtype=np.bool_)
                passes[rows] = True
            return passes
        codes, table = label_members(columns, group)
        if anti:
            allowed = np.less(table, rule.max_per_domain)
        elif anywhere:
            allowed = np.greater(table, 0.0)
        else:
            allowed = np.ones(len(table), dtype=np.bool_)
        allowed[-1] = False  # no label: in no domain
        return hosts_in(codes, allowed)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        group = request.group
        assert group is not None, "server_group: only a VM of a group is refused"
        host = fleet.host_at(index)
        found = refusal(group.rule, domain_of(group.rule.topology_key, host.id, host.labels), group.members)
        assert found is not None, f"server_group: {host.id} passes; only rejected hosts are explained"
        return found
