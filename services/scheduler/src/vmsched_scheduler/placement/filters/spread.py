"""``spread``: the ``spread`` policy of the VM's server group (Kubernetes' topologySpreadConstraints,
``whenUnsatisfiable: DoNotSchedule``).

A host passes when, with the VM on it, its domain holds at most ``max_skew`` more of the group's
members than the emptiest *eligible* domain. The eligible domains are those of the hosts that pass
every other filter for this VM (they run before this one): a zone that is offline, paused, full or
not what the VM's labels ask for does not hold the others back. A host in no domain (lacking the
topology label) takes no member. The rule is :func:`vmsched_common.groups.refuses`; the claim and the
commit check the same rule against the same domains (:func:`spread_domains`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vmsched_common.groups import GroupPolicy, domain_of, refusal
from vmsched_scheduler.placement.domains import domain_names, members_per_host
from vmsched_scheduler.placement.filters.base import HostFilter
from vmsched_scheduler.placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_scheduler.placement.model import RequestVector


class SpreadFilter:
    NAME = "spread"

    def __init__(self, before: Sequence[HostFilter]) -> None:
        self.before = tuple(before)  # the other filters: their hosts' domains are the eligible ones

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        group = request.group
        if group is None or group.rule.policy is not GroupPolicy.SPREAD:
            return None
        counts, in_domain = members_per_host(columns, group)
        eligible = self._others(columns, request)
        if in_domain is not None:
            np.logical_and(eligible, in_domain, out=eligible)
        if not eligible.any():
            return np.zeros(len(columns), dtype=np.bool_) if in_domain is None else in_domain
        lowest = float(counts[eligible].min())
        passes: BoolArray = np.less_equal(counts + (1.0 - lowest), group.rule.max_skew)
        if in_domain is not None:
            np.logical_and(passes, in_domain, out=passes)
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        group = request.group
        assert group is not None, "spread: only a VM of a group is refused"
        host = fleet.host_at(index)
        domain = domain_of(group.rule.topology_key, host.id, host.labels)
        found = refusal(group.rule, domain, group.members, self.domains(fleet.columns, request))
        assert found is not None, f"spread: {host.id} passes; only rejected hosts are explained"
        return found

    def domains(self, columns: FleetColumns, request: RequestVector) -> list[str]:
        """The eligible domains for this VM: those of the hosts that pass every other filter."""
        group = request.group
        if group is None:
            return []
        return domain_names(columns, group.rule.topology_key, self._others(columns, request))

    def _others(self, columns: FleetColumns, request: RequestVector) -> BoolArray:
        passing = np.ones(len(columns), dtype=np.bool_)
        for host_filter in self.before:
            passes = host_filter.mask(columns, request)
            if passes is not None:
                np.logical_and(passing, passes, out=passing)
        return passing
