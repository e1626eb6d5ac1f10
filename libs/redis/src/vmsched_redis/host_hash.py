"""A host's hash in the Redis snapshot (``p:host:<id>``): its fields, what a heartbeat writes there,
and a host as read back from it. The snapshot's layout is :mod:`vmsched_redis.snapshot`'s docstring.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vmsched_contract.messages import HostStatus, Overcommit, Resources, Taint, Usage
from vmsched_contract.storage import StoragePool
from vmsched_domain.extra import extra_json, extra_of
from vmsched_domain.fit import RESOURCES
from vmsched_domain.inventory import labels_json, taints_json, taints_of
from vmsched_domain.storage import PoolRoom
from vmsched_domain.usage import MeasuredUsage
from vmsched_redis.storage_pools import POOLS_ALLOCATED_FIELD, POOLS_FIELD, host_pools_of, pools_json

# The hash field of the networks a host reaches (a sorted JSON list; vmsched_contract.networks).
NETWORKS_FIELD = "networks"
# The hash field of the project a host is dedicated to ("": none).
DEDICATED_FIELD = "dedicated"
# The hash field of a host's named extra resources (a JSON map); ``a_extra`` what is allocated of them.
EXTRA_FIELD = "extra"


def allocated_field(field: str) -> str:
    return f"a_{field}"


def reserved_field(field: str) -> str:
    return f"r_{field}"


# Per measured resource: the measurement's field, the field of the allocation at the time it was
# folded in, and the allocation field that is copied there. The measurement is a *soft* field: written
# with every heartbeat, never a reason to announce the host on the change feed (it moves all the
# time; announcing it would make every scheduler re-read every host every few seconds). Readers see it
# when they read the host for any other reason: the periodic announcement of an unchanged host
# (``bump_interval``), a claim, a release, a state change, or a full read.
USAGE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("u_cpu", "u_a_cpu", allocated_field("cpu")),
    ("u_memory_mb", "u_a_memory_mb", allocated_field("memory_mb")),
)


@dataclass(frozen=True, slots=True)
class SnapshotHost:
    """One host as the snapshot knows it."""

    id: str
    status: str
    labels: Mapping[str, str]
    capacity: Resources
    reserved: Resources
    overcommit: Overcommit
    allocated: Resources
    vm_count: int
    scheduling_paused: bool
    last_heartbeat: float
    synced: bool
    usage: MeasuredUsage | None = None
    taints: tuple[Taint, ...] = ()
    capabilities: tuple[str, ...] = ()  # what its agent declares it can do (messages.Capability)
    networks: tuple[str, ...] = ()  # the networks it reaches, sorted
    dedicated_to: str | None = None  # the project whose VMs alone it takes
    storage_pools: tuple[PoolRoom, ...] = ()  # local ones with their allocation, shared ones by name


@dataclass(frozen=True, slots=True)
class HostWrite:
    """A host's state as a heartbeat says it is, with PostgreSQL's effective inventory (labels, taints,
    ratios, reserved: the agent's overlaid by the operator's) and pause flag."""

    host_id: str
    capacity: Resources
    overcommit: Overcommit
    reserved: Resources
    labels: Mapping[str, str]
    status: str
    heartbeat_at: float
    paused: bool
    # PostgreSQL's allocations, used only when the hash has none yet.
    allocated: Resources
    vm_count: int
    usage: Usage | None = None  # the agent's measurement, if it sent one
    taints: Sequence[Taint] = ()
    capabilities: Sequence[str] = ()
    networks: Sequence[str] = ()
    dedicated_to: str | None = None  # PostgreSQL's (the operator's)
    storage_pools: Sequence[StoragePool] = ()
    # PostgreSQL's allocation of its local pools (GB per pool), used only when the hash has none yet.
    pools_allocated: Mapping[str, int] = field(default_factory=dict)

    def state(self) -> list[str]:
        """The values of :data:`STATE_FIELDS`, in order."""
        values = {rule.field: str(getattr(self.capacity, rule.field)) for rule in RESOURCES}
        values[EXTRA_FIELD] = extra_json(self.capacity.extra)
        values["status"] = self.status
        values["capabilities"] = capabilities_json(self.capabilities)
        values[NETWORKS_FIELD] = networks_json(self.networks)
        values[POOLS_FIELD] = pools_json(self.storage_pools)
        values.update(
            inventory_fields(
                self.labels, self.taints, self.overcommit, self.reserved, self.paused, dedicated_to=self.dedicated_to
            )
        )
        return [values[name] for name in STATE_FIELDS]

    def allocations(self) -> list[str]:
        """The values of :data:`ALLOCATION_FIELDS`, in order."""
        allocated = self.allocated
        return [*amounts(allocated), extra_json(allocated.extra), str(self.vm_count), extra_json(self.pools_allocated)]

    def measured(self) -> list[str]:
        """The measurements of :data:`USAGE_FIELDS`, in order; empty strings when none was sent."""
        if self.usage is None:
            return [""] * len(USAGE_FIELDS)
        return [repr(float(self.usage.cpu_used)), str(self.usage.memory_used_mb)]


def _state_fields() -> list[str]:
    names: list[str] = []
    for rule in RESOURCES:
        names += [rule.field, reserved_field(rule.field)]
        if rule.ratio_field is not None:
            names.append(rule.ratio_field)
    return [
        *names,
        EXTRA_FIELD,
        "labels",
        "taints",
        "status",
        "paused",
        "capabilities",
        NETWORKS_FIELD,
        DEDICATED_FIELD,
        POOLS_FIELD,
    ]


def capabilities_json(capabilities: Sequence[str]) -> str:
    return json.dumps(sorted(set(capabilities)))


def networks_json(networks: Sequence[str]) -> str:
    """A host's networks as its hash field and its PostgreSQL column hold them: a sorted JSON list."""
    return json.dumps(sorted(set(networks)))


def inventory_fields(
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    overcommit: Overcommit,
    reserved: Resources,
    paused: bool,
    *,
    dedicated_to: str | None,
) -> dict[str, str]:
    """The hash fields of what the operator may set (the effective values): written by every
    heartbeat, and by ``PATCH /v1/hosts/{id}`` at once."""
    fields = {reserved_field(rule.field): str(getattr(reserved, rule.field)) for rule in RESOURCES}
    for rule in RESOURCES:
        if rule.ratio_field is not None:
            fields[rule.ratio_field] = repr(float(getattr(overcommit, rule.name)))
    fields["labels"] = labels_json(labels)
    fields["taints"] = taints_json(taints) or "[]"
    fields["paused"] = "1" if paused else "0"
    fields[DEDICATED_FIELD] = dedicated_to or ""
    return fields


# What a heartbeat writes every time, and what only a hash without allocations gets.
STATE_FIELDS: tuple[str, ...] = tuple(_state_fields())
ALLOCATION_FIELDS: tuple[str, ...] = (
    *(allocated_field(rule.field) for rule in RESOURCES),
    allocated_field(EXTRA_FIELD),
    "vm_count",
    POOLS_ALLOCATED_FIELD,
)


def _int(raw: Mapping[str, str], key: str) -> int:
    return int(raw.get(key) or 0)


def _resources(raw: Mapping[str, str], name: Any) -> Resources:
    # Written by vmsched's own scripts from validated values: built without validating again (the
    # schedulers read hundreds of hosts a round).
    return Resources.model_construct(
        None,
        **{rule.field: _int(raw, name(rule.field)) for rule in RESOURCES},
        extra=extra_of(raw.get(name(EXTRA_FIELD))),
    )


def amounts(resources: Resources) -> list[str]:
    """A resource amount per field of the fit rule, in its order, as script arguments."""
    return [str(getattr(resources, rule.field)) for rule in RESOURCES]


def parse_usage(raw: Mapping[str, str | None]) -> MeasuredUsage | None:
    """The measurement in a host's hash (fields of :data:`USAGE_FIELDS`), None when it has none."""
    (cpu, cpu_then, _), (memory, memory_then, _) = USAGE_FIELDS
    if not raw.get(cpu):
        return None
    return MeasuredUsage(
        cpu_used=float(raw.get(cpu) or 0.0),
        memory_used_mb=int(raw.get(memory) or 0),
        allocated_cpu=int(raw.get(cpu_then) or 0),
        allocated_memory_mb=int(raw.get(memory_then) or 0),
    )


# The hash fields of the allocation ratios, in RESOURCES order.
RATIO_FIELDS: tuple[str, ...] = tuple(rule.ratio_field for rule in RESOURCES if rule.ratio_field)


def parse_ratios(raw: Mapping[str, str | None]) -> Overcommit:
    """The host's allocation ratios from its hash's ratio fields (a missing one: 1)."""
    return Overcommit.model_construct(
        None, **{rule.name: float(raw.get(rule.ratio_field) or 1.0) for rule in RESOURCES if rule.ratio_field}
    )


def parse_host(host_id: str, raw: Mapping[str, str]) -> SnapshotHost | None:
    """A host record from its hash, or None for a hash without capacity (half-written, flushed)."""
    if "cpu" not in raw:
        return None
    return SnapshotHost(
        id=host_id,
        status=raw.get("status", HostStatus.OFFLINE.value),
        labels=json.loads(raw.get("labels") or "{}"),
        capacity=_resources(raw, str),
        reserved=_resources(raw, reserved_field),
        overcommit=parse_ratios(raw),
        allocated=_resources(raw, allocated_field),
        vm_count=_int(raw, "vm_count"),
        scheduling_paused=raw.get("paused") == "1",
        last_heartbeat=float(raw.get("hb") or 0.0),
        synced=raw.get("synced") == "1",
        usage=parse_usage(raw),
        taints=taints_of(json.loads(raw.get("taints") or "[]")) or (),
        capabilities=tuple(json.loads(raw.get("capabilities") or "[]")),
        networks=tuple(json.loads(raw.get(NETWORKS_FIELD) or "[]")),
        dedicated_to=raw.get(DEDICATED_FIELD) or None,
        storage_pools=host_pools_of(raw.get(POOLS_FIELD), raw.get(POOLS_ALLOCATED_FIELD)),
    )
