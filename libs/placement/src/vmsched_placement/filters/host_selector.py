"""``host_selector``: the host satisfies every term of the VM's host selector (Kubernetes' node
affinity, ``requiredDuringScheduling`` with one selector term's match expressions).

``In``: the host has the label with one of the values. ``NotIn``: it lacks the label, or has it with
none of the values (as Kubernetes: a host without the key passes). ``Exists`` / ``DoesNotExist``: it
has / lacks the key. Each term is a mask over the fleet's interned label columns, so a selector costs
a few comparisons per term; a request without one costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from vmsched_contract.messages import SelectorOperator
from vmsched_domain.selectors import holds
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector, SelectorTerm


class HostSelectorFilter:
    NAME = "host_selector"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not request.host_selector:
            return None
        first, *rest = request.host_selector
        passes = _term_mask(columns, first)
        for term in rest:
            np.logical_and(passes, _term_mask(columns, term), out=passes)
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        labels = fleet.host_at(index).labels
        failed = [_describe(term, labels) for term in request.host_selector if not holds(term, labels)]
        return f"{self.NAME}: " + "; ".join(failed)


def _term_mask(columns: FleetColumns, term: SelectorTerm) -> BoolArray:
    """The hosts satisfying one term, as a fresh array (the caller may write into it)."""
    match term.operator:
        case SelectorOperator.IN:
            return columns.label_in_mask(term.key, term.values)
        case SelectorOperator.NOT_IN:
            return np.logical_not(columns.label_in_mask(term.key, term.values))
        case SelectorOperator.EXISTS:
            return columns.label_key_mask(term.key)
        case SelectorOperator.DOES_NOT_EXIST:
            return np.logical_not(columns.label_key_mask(term.key))


def _describe(term: SelectorTerm, labels: Mapping[str, str]) -> str:
    """``zone In [z1, z2] (host has zone=z3)``: the term as written, then what the host has."""
    written = f"{term.key} {term.operator.value}"
    if term.values:
        written += f" [{', '.join(term.values)}]"
    value = labels.get(term.key)
    has = f"no {term.key}" if value is None else f"{term.key}={value}"
    return f"{written} (host has {has})"
