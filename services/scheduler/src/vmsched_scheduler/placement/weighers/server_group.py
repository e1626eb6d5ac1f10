"""``server_group`` preferences: the soft policies of the VM's server group (Nova's soft weighers).

``soft-anti-affinity``: prefer the hosts whose domain holds the fewest of the group's members.
``soft-affinity``: prefer the hosts whose domain holds members (any host while the group has none).
A host in no domain (lacking the topology label) counts as a domain without members. Neither refuses
a host: when every host is equally bad, the VM goes wherever the strategy says.
"""

from __future__ import annotations

import numpy as np

from vmsched_common.groups import GroupPolicy
from vmsched_scheduler.placement.domains import members_per_host
from vmsched_scheduler.placement.fleet import FleetColumns, FloatArray
from vmsched_scheduler.placement.model import RequestVector


class ServerGroupWeigher:
    NAME = "server_group"

    def penalty(self, columns: FleetColumns, request: RequestVector) -> FloatArray | None:
        group = request.group
        if group is None:
            return None
        if group.rule.policy is GroupPolicy.SOFT_ANTI_AFFINITY:
            counts, in_domain = members_per_host(columns, group)
            return counts if in_domain is None else np.where(in_domain, counts, 0.0)
        if group.rule.policy is GroupPolicy.SOFT_AFFINITY and sum(group.members.values()) > 0:
            counts, in_domain = members_per_host(columns, group)
            apart: FloatArray = np.equal(counts, 0.0).astype(np.float64)
            return apart
        return None
