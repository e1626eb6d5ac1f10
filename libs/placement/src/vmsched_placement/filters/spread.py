"""``spread``: the ``spread`` policy of the VM's server group (Kubernetes' topologySpreadConstraints,
``whenUnsatisfiable: DoNotSchedule``).

A host passes when, with the VM on it, its domain holds at most ``max_skew`` more of the group's
members than the emptiest *eligible* domain. The eligible domains are those of the hosts that pass
every other filter for this VM (they run before this one): a zone that is offline, paused, full or
not what the VM's labels ask for does not hold the others back. A host in no domain (lacking the
topology label) takes no member. The rule is :func:`vmsched_domain.groups.refuses`; the claim and the
commit check the same rule against the same domains (:func:`spread_domains`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_domain.groups import domain_of, refusal
from vmsched_placement.domains import codes_among, domain_names, host_members, hosts_in, label_members
from vmsched_placement.filters.base import HostFilter
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class SpreadFilter:
    NAME = "spread"

    def __init__(self, before: Sequence[HostFilter]) -> None:
        self.before = tuple(before)  # the other filters: their hosts' domains are the eligible ones

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        group = request.group
        if group is None or group.rule.policy is not GroupPolicy.SPREAD:
            return None
        return self.mask_among(columns, request, self._others(columns, request))

    def mask_among(self, columns: FleetColumns, request: RequestVector, passing: BoolArray | None) -> BoolArray | None:
        """:meth:`mask`, given the hosts that pass every other filter (None: all of them): ``decide``
        has them at hand, and computing them again would double the cost of a spread decision."""
        group = request.group
        if group is None or group.rule.policy is not GroupPolicy.SPREAD:
            return None
        skew = group.rule.max_skew
        if group.rule.topology_key == HOST_TOPOLOGY:
            rows, counts = host_members(columns, group)
            eligible_rows = np.ones(len(rows), dtype=np.bool_) if passing is None else passing[rows]
            eligible_hosts = len(columns) if passing is None else int(np.count_nonzero(passing))
            # An eligible host without members makes the emptiest domain 0.
            if eligible_hosts > int(np.count_nonzero(eligible_rows)):
                lowest = 0.0
            elif eligible_hosts:
                lowest = float(counts[eligible_rows].min())
            else:
                return np.zeros(len(columns), dtype=np.bool_)
            passes = np.ones(len(columns), dtype=np.bool_)
            passes[rows[counts + (1.0 - lowest) > skew]] = False
            return passes
        codes, table = label_members(columns, group)
        eligible = codes_among(codes, passing, len(table))
        eligible[-1] = False  # no label: in no domain
        if not eligible.any():
            return np.zeros(len(columns), dtype=np.bool_)
        lowest = float(table[eligible].min())
        allowed = np.less_equal(table + (1.0 - lowest), skew)
        allowed[-1] = False
        return hosts_in(codes, allowed)

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
