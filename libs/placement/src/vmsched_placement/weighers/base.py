"""The weigher extension point: a soft rule that would rather not use some hosts, and never rejects.

Filters decide which hosts may take a VM; weighers only order them. Among the hosts that pass every
filter, the engine adds up the weighers' penalties and lets the strategy rank only the hosts of the
lowest total (lexicographic: penalty first, then the strategy's score). A weigher therefore never
changes which hosts are eligible, and a VM is never unschedulable because of one: when every
eligible host is penalised, the least penalised ones are ranked.

Adding one is one small file: a class with a ``NAME`` (its key in the decision record's
``preferences``), ``penalty`` and ``reason``, registered in ``weighers/__init__.py`` (order matters
only for the order of the record's keys), with a test file of its own (see test_gpu_affinity.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns, FloatArray
    from vmsched_placement.model import RequestVector


@runtime_checkable
class HostWeigher(Protocol):
    """A soft placement rule. ``NAME`` is its key in the decision record's ``preferences``."""

    NAME: str

    def penalty(self, columns: FleetColumns, request: RequestVector) -> BoolArray | FloatArray | None:
        """How much this rule would rather not use each host, over the fleet's rows: 0 (False) not at
        all, more is worse (True counts 1; a graded rule may return counts, e.g. group members).

        None means no opinion on this request (no pass over the fleet is spent). The engine never
        writes into the returned array; a weigher may return a cached one.
        """
        ...

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        """Why the host in row ``index`` is penalised, as ``"<NAME>: ..."``. Only called for hosts
        with a penalty; only when a person asks."""
        ...
