"""Taints and tolerations as the engine reads them, and Kubernetes' rule for when a toleration
tolerates a taint (``ToleratesTaint`` of k8s.io/api/core/v1): the effects match (an empty effect
takes every effect), the keys match (an empty key takes every key; only ``Exists`` may leave it
empty), and, for ``Equal``, the values match."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
EXISTS = "Exists"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NO_SCHEDULE | PREFER_NO_SCHEDULE

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # "Equal" | EXISTS
    value: str = ""
    effect: str | None = None  # None: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == EXISTS or self.value == taint.value


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration], effect: str) -> list[Taint]:
    """The taints of ``effect`` that no toleration tolerates, in the host's order."""
    accepted = tuple(tolerations)
    return [t for t in taints if t.effect == effect and not any(ok.tolerates(t) for ok in accepted)]
