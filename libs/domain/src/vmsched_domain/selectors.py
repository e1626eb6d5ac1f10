"""Whether a host's labels satisfy a VM's host selector: stated once, here. The placement engine
computes the same rule as masks over its label columns (``vmsched_placement.filters.host_selector``)
and uses this for its reasons; the cell router uses it on a cell's label sets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from vmsched_contract.messages import SelectorOperator


class Term(Protocol):
    """One selector term: the engine's ``SelectorTerm`` or the request's ``HostSelectorTerm``."""

    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> SelectorOperator: ...
    @property
    def values(self) -> Sequence[str]: ...


def holds(term: Term, labels: Mapping[str, str]) -> bool:
    """Whether one host's ``labels`` satisfy ``term``. ``In``: the host has the label with one of the
    values. ``NotIn``: it lacks the label, or has it with none of the values (as Kubernetes: a host
    without the key passes). ``Exists`` / ``DoesNotExist``: it has / lacks the key."""
    value = labels.get(term.key)
    match term.operator:
        case SelectorOperator.IN:
            return value is not None and value in term.values
        case SelectorOperator.NOT_IN:
            return value is None or value not in term.values
        case SelectorOperator.EXISTS:
            return value is not None
        case SelectorOperator.DOES_NOT_EXIST:
            return value is None


def matches(required: Mapping[str, str], selector: Iterable[Term], labels: Mapping[str, str]) -> bool:
    """Whether a host with ``labels`` may take a VM asking for ``required`` labels (each one present,
    with that value) and the terms of ``selector`` (every one holding)."""
    return all(labels.get(key) == value for key, value in required.items()) and all(
        holds(term, labels) for term in selector
    )
