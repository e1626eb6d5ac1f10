"""The fit rule: whether a VM fits on a host. Stated once, here; every other copy is made from it.

For each resource the VM asks for (a resource it asks none of is not checked, as Kubernetes'
``fitsRequest``: a host over capacity on GPUs can still take a VM without GPUs)::

    allocated + requested <= floor((capacity - reserved) x ratio + 1e-9)

``reserved`` is held back for the hypervisor itself and ``ratio`` is the allocation (overcommit)
ratio, as in OpenStack Placement's inventories; GPUs are never overcommitted. The ``1e-9`` absorbs
float error in capacity x ratio (16 x 1.1 is 17.600000000000001, 10 x 0.7 is 6.999999999999999).
Named extra resources (``{"fpga": 2}``) follow the same rule as GPUs, name by name: whole units,
never overcommitted, nothing reserved (:func:`extra_shortfall`).

Four places need the rule: the placement engine (numpy columns), the Redis claim (Lua), the
PostgreSQL commit guard (SQL) and the slow paths of people and simulators (Python). The engine
calls :func:`allocatable` on its columns; the Lua functions and the SQL predicates are rendered here
(:func:`lua_shortfall_function`, :func:`sql_fits`, :func:`sql_extra_fits`); a Hypothesis test
(tests/integration/test_fit_rule.py) throws random hosts and requests at all four and demands the
same answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# Float error in capacity x ratio is far below this; a real fraction of a unit is far above it.
RATIO_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class ResourceRule:
    """One resource of the rule. ``name`` is what people read (rejections, reasons); ``field`` the
    attribute of :class:`~vmsched_contract.messages.Resources` and the column stem everywhere."""

    name: str
    field: str
    unit: str
    overcommits: bool  # has an allocation ratio; without one its ratio is 1

    @property
    def ratio_field(self) -> str | None:
        return f"{self.name}_ratio" if self.overcommits else None


RESOURCES: tuple[ResourceRule, ...] = (
    ResourceRule("cpu", "cpu", "", overcommits=True),
    ResourceRule("memory", "memory_mb", " MiB", overcommits=True),
    ResourceRule("disk", "disk_gb", " GB", overcommits=True),
    ResourceRule("gpu", "gpu", "", overcommits=False),
)
RESOURCE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RESOURCES)


class Amounts(Protocol):
    """Anything with an amount per resource field (``Resources``, an engine ``Demand``), and its named
    extra resources (a ``{name: count}`` map, or ``(name, count)`` pairs)."""

    @property
    def cpu(self) -> int: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def disk_gb(self) -> int: ...
    @property
    def gpu(self) -> int: ...
    @property
    def extra(self) -> Mapping[str, int] | Iterable[tuple[str, int]]: ...


class Ratios(Protocol):
    """Allocation ratios of the resources that overcommit (``Overcommit``)."""

    @property
    def cpu(self) -> float: ...
    @property
    def memory(self) -> float: ...
    @property
    def disk(self) -> float: ...


def allocatable(capacity: Any, reserved: Any, ratio: Any) -> Any:
    """What a host may hand out of one resource: ``floor((capacity - reserved) x ratio + 1e-9)``.

    Works on ints and floats, and elementwise on numpy arrays (the engine's columns), with the same
    IEEE operations in the same order, so every caller gets the same number to the bit."""
    if isinstance(capacity, int | float):
        return math.floor((capacity - reserved) * ratio + RATIO_EPSILON)
    import numpy as np  # only the engine passes arrays; the other callers do not need numpy

    return np.floor((capacity - reserved) * ratio + RATIO_EPSILON)


def ratio_of(rule: ResourceRule, ratios: Ratios) -> float:
    return float(getattr(ratios, rule.name)) if rule.overcommits else 1.0


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource a VM does not fit in, with the numbers a person needs."""

    resource: str
    requested: int
    free: int  # allocatable - allocated; negative when the host is over its capacity
    capacity: int
    reserved: int
    ratio: float
    allocated: int
    unit: str

    @property
    def reason(self) -> str:
        """``memory: needs 8192 MiB, 2048 MiB free (16384 MiB x 1.0 overcommit, 14336 MiB allocated)``."""
        detail = f"{self.capacity}{self.unit} total"
        if self.ratio != 1.0:
            detail += f" x {self.ratio:g} overcommit"
        if self.reserved:
            detail += f", {self.reserved}{self.unit} reserved"
        return (
            f"{self.resource}: needs {self.requested}{self.unit}, {self.free}{self.unit} free "
            f"({detail}, {self.allocated}{self.unit} allocated)"
        )


def shortfall(
    rule: ResourceRule, requested: Amounts, capacity: Amounts, reserved: Amounts, ratios: Ratios, allocated: Amounts
) -> Shortfall | None:
    """The rule for one resource: None when it fits (or the VM asks none of it)."""
    asked = int(getattr(requested, rule.field))
    if asked <= 0:
        return None
    total = int(getattr(capacity, rule.field))
    held = int(getattr(reserved, rule.field))
    ratio = ratio_of(rule, ratios)
    used = int(getattr(allocated, rule.field))
    free = allocatable(total, held, ratio) - used
    if asked <= free:
        return None
    return Shortfall(rule.name, asked, free, total, held, ratio, used, rule.unit)


def shortfalls(
    requested: Amounts, capacity: Amounts, reserved: Amounts, ratios: Ratios, allocated: Amounts
) -> list[Shortfall]:
    """Every resource ``requested`` does not fit in, in :data:`RESOURCES` order, then the first
    named extra resource that does not (empty: it fits)."""
    found = [shortfall(rule, requested, capacity, reserved, ratios, allocated) for rule in RESOURCES]
    if requested.extra:
        found.append(extra_shortfall(counts(requested.extra), counts(capacity.extra), counts(allocated.extra)))
    return [s for s in found if s is not None]


def fits(requested: Amounts, capacity: Amounts, reserved: Amounts, ratios: Ratios, allocated: Amounts) -> bool:
    return not shortfalls(requested, capacity, reserved, ratios, allocated)


# -- named extra resources -----------------------------------------------------------------------------

# The name rejections and reasons give every named extra resource (seed 002's open resource map).
EXTRA = "extra"


def counts(extra: Mapping[str, int] | Iterable[tuple[str, int]]) -> Mapping[str, int]:
    """Named extra resources as a ``{name: count}`` map (``Resources`` keeps a map, ``Demand`` pairs)."""
    return extra if isinstance(extra, Mapping) else dict(extra)


def extra_shortfall(
    requested: Mapping[str, int], capacity: Mapping[str, int], allocated: Mapping[str, int]
) -> Shortfall | None:
    """The rule for named extra resources (``{"fpga": 1}``): each counts as GPUs do, whole units,
    never overcommitted, nothing reserved, checked only when asked for::

        allocated[name] + requested[name] <= capacity[name]

    A host that does not report a name has none of it. None when every name fits; else the first
    name, in sorted order, that does not (its unit in the reason is the name)."""
    for name in sorted(requested):
        asked = int(requested[name])
        if asked <= 0:
            continue
        total = int(capacity.get(name, 0))
        used = int(allocated.get(name, 0))
        if used + asked > total:
            return Shortfall(EXTRA, asked, total - used, total, 0, 1.0, used, f" {name}")
    return None


# -- the same rule in Lua and SQL -------------------------------------------------------------------


def lua_shortfall_function() -> str:
    """A Lua function ``shortfall(need, capacity, reserved, ratio, used)``: each argument a table of
    numbers in :data:`RESOURCES` order; returns the name of the first resource that does not fit,
    or nil; then :func:`lua_extra_shortfall_function`. Pasted into the claim script where it says
    ``{{fit rule}}``."""
    names = ", ".join(f"'{rule.name}'" for rule in RESOURCES)
    return "\n".join(
        (
            "-- The fit rule, rendered from vmsched_domain.fit (do not edit here).",
            "local function shortfall(need, capacity, reserved, ratio, used)",
            f"  local names = {{{names}}}",
            "  for i = 1, #names do",
            f"    if need[i] > 0 and used[i] + need[i] > math.floor((capacity[i] - reserved[i]) * ratio[i] + {RATIO_EPSILON!r}) then",  # noqa: E501
            "      return names[i]",
            "    end",
            "  end",
            "  return nil",
            "end",
            "",
            lua_extra_shortfall_function(),
        )
    )


def lua_extra_shortfall_function() -> str:
    """A Lua function ``extra_shortfall(names, need, capacity, used)``: ``names`` the extra resources
    asked for, sorted; the others tables of name -> count (a name a host lacks: none of it). Returns
    :data:`EXTRA` when one does not fit (:func:`extra_shortfall`), or nil. Pasted in with
    :func:`lua_shortfall_function`."""
    return "\n".join(
        (
            "-- The fit rule of named extra resources, rendered from vmsched_domain.fit (do not edit here).",
            "local function extra_shortfall(names, need, capacity, used)",
            "  for _, name in ipairs(names) do",
            "    if need[name] > 0 and (used[name] or 0) + need[name] > (capacity[name] or 0) then",
            f"      return '{EXTRA}'",
            "    end",
            "  end",
            "  return nil",
            "end",
        )
    )


def sql_extra_fits(requested: str, capacity: str, allocated: str) -> str:
    """A SQL boolean expression of the rule for one named extra resource (:func:`extra_shortfall`):
    each argument the SQL expression of that name's amount (0 where a host has none of it)."""
    return f"({requested} <= 0 OR {allocated} + {requested} <= {capacity})"


def sql_fits(
    requested: Callable[[ResourceRule], str],
    capacity: Callable[[ResourceRule], str],
    reserved: Callable[[ResourceRule], str],
    ratio: Callable[[ResourceRule], str | None],
    allocated: Callable[[ResourceRule], str],
) -> str:
    """A SQL boolean expression of the rule; each callable gives the SQL expression of one resource's
    amount (``ratio`` None for a resource without one). Integer arithmetic stays integer until the
    ratio, a float8, multiplies it, as in Python and Lua."""
    terms: list[str] = []
    for rule in RESOURCES:
        asked = requested(rule)
        factor = ratio(rule) if rule.overcommits else None
        scaled = f"({capacity(rule)} - {reserved(rule)}) * {factor or 'CAST(1.0 AS float8)'}"
        limit = f"floor({scaled} + CAST({RATIO_EPSILON!r} AS float8))"
        terms.append(f"({asked} <= 0 OR {allocated(rule)} + {asked} <= {limit})")
    return "(" + " AND ".join(terms) + ")"
