"""A host's inventory as vmsched stores it: the operator's allocation ratio overrides, and the one
JSON form of labels, taints and tolerations that PostgreSQL's columns and the Redis snapshot share.

Which value is effective, the agent's or the operator's, is the overlay :mod:`vmsched_pg.inventory`
writes once for both writers (the gateway's heartbeat upsert and the API's PATCH).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vmsched_contract.messages import Taint, TaintEffect, Toleration, TolerationOperator
from vmsched_domain.fit import RESOURCES

# The ratio columns (``cpu_ratio``, ...) and the overcommit field each one is (``cpu``, ...).
RATIOS: tuple[tuple[str, str], ...] = tuple(
    (rule.ratio_field, rule.name) for rule in RESOURCES if rule.ratio_field is not None
)


@dataclass(frozen=True, slots=True)
class RatioOverrides:
    """The allocation ratios the operator set; None where the agent's applies."""

    cpu: float | None = None
    memory: float | None = None
    disk: float | None = None

    def columns(self) -> dict[str, float | None]:
        """``{"operator_cpu_ratio": ..., ...}``."""
        return {f"operator_{column}": getattr(self, name) for column, name in RATIOS}


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
