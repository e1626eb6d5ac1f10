"""Networks: the ones a host reaches (its agent's heartbeat says so) and the ones a VM needs on its
host (CloudStack's "network reachable from host"). A name is the operator's (``vlan-100``,
``tenant-a.storage``); vmsched only compares names."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

NetworkName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
MAX_HOST_NETWORKS = 256
MAX_VM_NETWORKS = 16


def _each_once(names: list[str]) -> list[str]:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"network {name!r} is named twice")
        seen.add(name)
    return names


HostNetworks = Annotated[
    list[NetworkName],
    Field(
        max_length=MAX_HOST_NETWORKS,
        description="the networks this host reaches (e.g. vlan-100): only a VM whose networks are all among "
        "them may go here; absent: none",
    ),
    AfterValidator(_each_once),
]
VmNetworks = Annotated[
    list[NetworkName],
    Field(
        max_length=MAX_VM_NETWORKS,
        description="the networks the VM needs: it goes only to a host that reaches every one of them "
        "(rejection reason 'network')",
    ),
    AfterValidator(_each_once),
]
