"""A host's inventory: what its agent reports, overlaid by what the operator set.

The ``hosts`` table keeps both sources, ``agent_*`` (the last heartbeat) and ``operator_*``
(``PATCH /v1/hosts/{id}``), and the effective value in the column every reader uses (``labels``,
``taints``, ``cpu_ratio``, ...: the API, PostgreSQL's guard, the snapshot). The overlay, written once
here and applied by both writers (the gateway's heartbeat upsert and the API's PATCH):

- labels: the agent's, and every key the operator set takes the operator's value;
- taints: the operator's list when set (even an empty one), else the agent's;
- each allocation ratio: the operator's when set, else the agent's;
- reserved capacity is the operator's alone (agents report none);
- named extra resources (``extra``) are the agent's alone: like cpu or GPUs they are capacity the
  hardware has, and the fit rule reserves and overcommits none of them, so there is nothing to overlay.

The operator's word wins whatever the agent sends later, and withdrawing it (a null) lets the
agent's value through again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vmsched_common.fit import RESOURCES
from vmsched_common.messages import Taint, TaintEffect, Toleration, TolerationOperator

# The ratio columns (``cpu_ratio``, ...) and the overcommit field each one is (``cpu``, ...).
RATIOS: tuple[tuple[str, str], ...] = tuple(
    (rule.ratio_field, rule.name) for rule in RESOURCES if rule.ratio_field is not None
)


def overlay(agent: str, operator: str) -> str:
    """The ``SET`` assignments of the effective columns, from the agent's values in the row (or
    alias) ``agent`` and the operator's in ``operator``."""
    assignments = [
        f"labels = {agent}.agent_labels || {operator}.operator_labels",
        f"taints = coalesce({operator}.operator_taints, {agent}.agent_taints)",
    ]
    assignments += [
        f"{column} = coalesce({operator}.operator_{column}, {agent}.agent_{column})" for column, _ in RATIOS
    ]
    return ", ".join(assignments)


@dataclass(frozen=True, slots=True)
class RatioOverrides:
    """The allocation ratios the operator set; None where the agent's applies."""

    cpu: float | None = None
    memory: float | None = None
    disk: float | None = None

    def columns(self) -> dict[str, float | None]:
        """``{"operator_cpu_ratio": ..., ...}``."""
        return {f"operator_{column}": getattr(self, name) for column, name in RATIOS}

    @classmethod
    def of_row(cls, row: Any) -> RatioOverrides:
        return cls(**{name: getattr(row, f"operator_{column}") for column, name in RATIOS})


def taints_of(raw: Iterable[Mapping[str, str]] | None) -> tuple[Taint, ...] | None:
    """Taints read back from a JSONB column only validated values reach (None stays None)."""
    if raw is None:
        return None
    return tuple(
        Taint.model_construct(key=t["key"], value=t.get("value", ""), effect=TaintEffect(t["effect"])) for t in raw
    )


def taints_json(taints: Sequence[Taint] | None) -> str | None:
    """The JSON a taints column (and the snapshot) stores: in the given order, compact."""
    if taints is None:
        return None
    return json.dumps([taint.model_dump(mode="json") for taint in taints], separators=(",", ":"))


def labels_json(labels: Mapping[str, str]) -> str:
    """The JSON a labels column (and the snapshot) stores: keys sorted, compact."""
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def tolerations_of(raw: Iterable[Mapping[str, str | None]] | None) -> tuple[Toleration, ...]:
    """A VM's tolerations read back from its JSONB column (validated when the VM was accepted)."""
    return tuple(
        Toleration.model_construct(
            key=t.get("key") or "",
            operator=TolerationOperator(t.get("operator") or TolerationOperator.EQUAL.value),
            value=t.get("value") or "",
            effect=TaintEffect(effect) if (effect := t.get("effect")) else None,
        )
        for t in raw or ()
    )
