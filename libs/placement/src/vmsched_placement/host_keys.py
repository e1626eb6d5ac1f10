"""Host facts that few distinct values cover, as interned columns: the networks each host reaches,
the project a host is dedicated to. Each host's value is a small integer code (an index into the
column's ``values``), so a rule judges each distinct value once and spreads the verdicts to the hosts
by their code: a fleet of 10,000 hosts with a dozen network sets costs a dozen judgements and one
gather, and a rule every value passes costs no pass over the hosts at all.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from vmsched_placement.model import HostState

BoolArray = npt.NDArray[np.bool_]
CodeArray = npt.NDArray[np.int32]
KeyT = TypeVar("KeyT", bound=Hashable)
# Verdicts kept per column (distinct network sets asked for, projects asking): beyond, they start over.
MAX_QUESTIONS = 1024


class InternedColumn(Generic[KeyT]):
    """One host fact (``key(host)``) per row of the fleet, interned. Values are never forgotten while
    the column lives (a fleet rebuild starts it again): they are few."""

    __slots__ = ("_codes_of", "_judged", "codes", "key", "values")

    def __init__(self, key: Callable[[HostState], KeyT], hosts: Sequence[HostState]) -> None:
        self.key = key
        self.values: list[KeyT] = []
        self._codes_of: dict[KeyT, int] = {}
        self.codes: CodeArray = self._encode(hosts)
        # Per question asked (the caller's key for its rule): each value's verdict so far. Values are
        # only ever added, so a kept verdict stays true; only the values added since are judged.
        self._judged: dict[Hashable, BoolArray] = {}

    def code(self, value: KeyT) -> int:
        found = self._codes_of.get(value)
        if found is None:
            found = self._codes_of[value] = len(self.values)
            self.values.append(value)
        return found

    def _encode(self, hosts: Sequence[HostState]) -> CodeArray:
        return np.fromiter((self.code(self.key(host)) for host in hosts), np.int32, len(hosts))

    def write(self, index: int, host: HostState) -> None:
        self.codes[index] = self.code(self.key(host))

    def insert(self, positions: Sequence[int], hosts: Sequence[HostState]) -> None:
        self.codes = np.insert(self.codes, positions, self._encode(hosts))

    def delete(self, index: int) -> None:
        self.codes = np.delete(self.codes, index)

    def mask(self, passes: Callable[[KeyT], bool], question: Hashable) -> BoolArray | None:
        """Which hosts' values ``passes`` accepts (a fresh array); None when it accepts every value
        (every host passes, and no pass over the hosts is spent). ``question`` names what ``passes``
        decides (the same question, the same verdicts): each value is judged once per question."""
        judged = self._judged.get(question)
        if judged is None or len(judged) < len(self.values):
            known = 0 if judged is None else len(judged)
            fresh = np.fromiter((passes(value) for value in self.values[known:]), np.bool_, len(self.values) - known)
            judged = fresh if judged is None else np.concatenate((judged, fresh))
            if len(self._judged) >= MAX_QUESTIONS:
                self._judged.clear()
            self._judged[question] = judged
        if judged.all():
            return None
        if not judged.any():
            return np.zeros(len(self.codes), dtype=np.bool_)
        gathered: BoolArray = judged[self.codes]
        return gathered


def _networks(host: HostState) -> frozenset[str]:
    return host.networks


def _dedicated_to(host: HostState) -> str | None:
    return host.dedicated_to


class HostKeys:
    """The interned columns of a fleet, kept current with it row by row."""

    __slots__ = ("dedication", "networks")

    def __init__(self, hosts: Sequence[HostState]) -> None:
        self.networks: InternedColumn[frozenset[str]] = InternedColumn(_networks, hosts)
        self.dedication: InternedColumn[str | None] = InternedColumn(_dedicated_to, hosts)

    def _columns(self) -> tuple[InternedColumn[Any], ...]:
        return (self.networks, self.dedication)

    def write(self, index: int, host: HostState) -> None:
        for column in self._columns():
            column.write(index, host)

    def insert(self, positions: Sequence[int], hosts: Sequence[HostState]) -> None:
        for column in self._columns():
            column.insert(positions, hosts)

    def delete(self, index: int) -> None:
        for column in self._columns():
            column.delete(index)
