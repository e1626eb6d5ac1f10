"""A server group's members over the fleet's columns, in the cheapest shape for each topology key.

A domain is a host (topology key ``host``) or a value of a host label. A group has few members next
to a fleet of thousands of hosts, so the group rules never build a per-host count array:

- keyed on ``host``: the rows of the hosts holding members, and how many each holds (a handful);
  a rule then touches those rows only;
- keyed on a label: a table of members per value of the label (the fleet interns each value as a
  small integer code, :meth:`FleetColumns.label_column`), with one last slot, always 0, for
  ``NO_LABEL`` (-1): a rule computes its verdict per value and gathers it for every host at once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from vmsched_contract.groups import HOST_TOPOLOGY
from vmsched_placement.fleet import NO_LABEL, BoolArray, CodeArray, FleetColumns, FloatArray
from vmsched_placement.model import PlacementGroup

RowArray = npt.NDArray[np.intp]


def host_members(columns: FleetColumns, group: PlacementGroup) -> tuple[RowArray, FloatArray]:
    """The rows of the hosts that hold members (hosts the fleet no longer knows are left out), and
    how many each holds (> 0)."""
    rows: list[int] = []
    counts: list[float] = []
    for host_id, members in group.members.items():
        index = columns.index_of(host_id) if members > 0 else None
        if index is not None:
            rows.append(index)
            counts.append(float(members))
    return np.array(rows, dtype=np.intp), np.array(counts, dtype=np.float64)


def label_members(columns: FleetColumns, group: PlacementGroup) -> tuple[CodeArray, FloatArray]:
    """Each host's code for the group's label, and the members per code (``table[-1]``, hosts
    without the label, is 0)."""
    codes, values = columns.label_column(group.rule.topology_key)
    table = np.zeros(len(values) + 1, dtype=np.float64)
    for domain, members in group.members.items():
        code = values.get(domain)
        if code is not None:
            table[code] = members
    return codes, table


# Beyond this many values to compare with, one gather over the table is cheaper than comparisons.
_FEW = 4


def hosts_in(codes: CodeArray, allowed: BoolArray) -> BoolArray:
    """Per host, ``allowed[its code]`` (``allowed[-1]`` for a host without the label), as a fresh
    array. A rule allows or refuses a handful of a label's values, so comparing the codes with
    those few is several times cheaper than a gather over every host."""
    chosen = np.flatnonzero(allowed[:-1])
    if not allowed[-1]:
        if len(chosen) == 0:
            return np.zeros(len(codes), dtype=np.bool_)
        if len(chosen) <= _FEW:
            passes: BoolArray = np.equal(codes, chosen[0])
            for code in chosen[1:].tolist():
                np.logical_or(passes, np.equal(codes, code), out=passes)
            return passes
    refused = np.flatnonzero(~allowed[:-1])
    if len(refused) <= _FEW:
        passes = np.ones(len(codes), dtype=np.bool_) if allowed[-1] else np.not_equal(codes, NO_LABEL)
        for code in refused.tolist():
            np.logical_and(passes, np.not_equal(codes, code), out=passes)
        return passes
    gathered: BoolArray = np.take(allowed, codes)  # -1 takes the last slot
    return gathered


def codes_among(codes: CodeArray, hosts: BoolArray | None, size: int) -> BoolArray:
    """Which codes (slot -1: no label) the hosts in ``hosts`` (None: all) carry, by counting them
    per code: a fancy assignment per host costs far more than this one counting pass."""
    counted = np.bincount(codes + 1, weights=None if hosts is None else hosts, minlength=size)
    present = np.empty(size, dtype=np.bool_)
    np.greater(counted[1:], 0, out=present[:-1])
    present[-1] = counted[0] > 0  # NO_LABEL (-1) was counted at 0
    return present


def domain_names(columns: FleetColumns, key: str, hosts: npt.NDArray[np.bool_]) -> list[str]:
    """The domains of the hosts in ``hosts`` (sorted; hosts in no domain add none)."""
    if key == HOST_TOPOLOGY:
        return [columns.ids[index] for index in np.flatnonzero(hosts).tolist()]
    codes, values = columns.label_column(key)
    present = codes_among(codes, hosts, len(values) + 1)
    return sorted(value for value, code in values.items() if present[code])
