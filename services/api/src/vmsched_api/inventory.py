"""What an operator's ``PATCH /v1/hosts/{id}`` makes of the host's operator fields: a pure function
of the patch and the fields as they are, so a PATCH that leaves a field out keeps it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vmsched_contract.api import HostPatch
from vmsched_contract.messages import Resources, Taint
from vmsched_domain.fit import RESOURCES
from vmsched_domain.inventory import RatioOverrides, labels_json, taints_json
from vmsched_domain.records import HostRecord


@dataclass(frozen=True, slots=True)
class OperatorFields:
    """Everything of a host that only the operator sets."""

    labels: Mapping[str, str]
    taints: tuple[Taint, ...] | None
    overcommit: RatioOverrides
    reserved: Resources
    paused: bool
    dedicated_to: str | None = None

    @classmethod
    def of(cls, host: HostRecord) -> OperatorFields:
        return cls(
            labels=dict(host.operator_labels),
            taints=host.operator_taints,
            overcommit=host.operator_overcommit,
            reserved=host.reserved,
            paused=host.scheduling_paused,
            dedicated_to=host.dedicated_to,
        )

    def params(self) -> dict[str, Any]:
        """The columns' values for the PATCH statement."""
        return {
            "operator_labels": labels_json(self.labels),
            "operator_taints": taints_json(self.taints),
            **self.overcommit.columns(),
            **{f"reserved_{rule.field}": getattr(self.reserved, rule.field) for rule in RESOURCES},
            "scheduling_paused": self.paused,
            "dedicated_to": self.dedicated_to,
        }


def patched(fields: OperatorFields, patch: HostPatch) -> OperatorFields:
    """``fields`` with what ``patch`` gives changed: labels merged (a null removes one), taints
    replaced (a null withdraws them), each ratio given set (a null withdraws it), each reserved
    amount given set, the dedication set (a null ends it)."""
    given = patch.model_fields_set
    if patch.scheduling_paused is not None:
        fields = replace(fields, paused=patch.scheduling_paused)
    if patch.labels is not None:
        labels = dict(fields.labels)
        for key, value in patch.labels.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        fields = replace(fields, labels=labels)
    if "taints" in given:
        fields = replace(fields, taints=None if patch.taints is None else tuple(patch.taints))
    if patch.overcommit is not None:
        ratios = {name: getattr(patch.overcommit, name) for name in patch.overcommit.model_fields_set}
        fields = replace(fields, overcommit=replace(fields.overcommit, **ratios))
    if "dedicated_to" in given:
        fields = replace(fields, dedicated_to=patch.dedicated_to)
    if patch.reserved is not None:
        amounts = {name: getattr(patch.reserved, name) for name in patch.reserved.model_fields_set}
        fields = replace(fields, reserved=Resources(**{**fields.reserved.model_dump(), **amounts}))
    return fields
