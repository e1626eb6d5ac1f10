"""``server_group``: the hard policies ``anti-affinity`` and ``affinity`` of the VM's server group.

``anti-affinity``: the host's domain holds fewer than ``max_per_domain`` of the group's members.
``affinity``: the host's domain holds members, or the group has none yet (the first fixes the domain).
A host in no domain (lacking the topology label) takes no member. The rule is
:func:`vmsched_common.groups.refuses`; the counts are the request's (the snapshot's, plus the round's
own choices so far).
"""

from __future__ import annotations

import numpy as np

from vmsched_common.groups import GroupPolicy, domain_of, refusal
from vmsched_scheduler.placement.domains import members_per_host
from vmsched_scheduler.placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_scheduler.placement.model import RequestVector

_POLICIES = (GroupPolicy.ANTI_AFFINITY, GroupPolicy.AFFINITY)


class ServerGroupFilter:
    NAME = "server_group"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        group = request.group
        if group is None or group.rule.policy not in _POLICIES:
            return None
        counts, in_domain = members_per_host(columns, group)
        if group.rule.policy is GroupPolicy.ANTI_AFFINITY:
            passes: BoolArray = np.less(counts, group.rule.max_per_domain)
        elif sum(group.members.values()) > 0:
            passes = np.greater(counts, 0)
        elif in_domain is None:
            return None  # no member yet, every host a domain: any host will do
        else:
            return in_domain
        if in_domain is not None:
            np.logical_and(passes, in_domain, out=passes)
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        group = request.group
        assert group is not None, "server_group: only a VM of a group is refused"
        host = fleet.host_at(index)
        found = refusal(group.rule, domain_of(group.rule.topology_key, host.id, host.labels), group.members)
        assert found is not None, f"server_group: {host.id} passes; only rejected hosts are explained"
        return found
