"""The hosts a simulated fleet pretends to be: generated from a profile or read from a file."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from vmsched_contract.messages import Capability, HostId, Labels, Overcommit, Resources, Taint
from vmsched_contract.storage import StoragePool

# What a simulated host can do unless its spec says otherwise: everything.
ALL_CAPABILITIES: tuple[str, ...] = tuple(c.value for c in Capability)


class HostSpec(BaseModel):
    """One host: what its agent announces. The shape of a host in ``GET /v1/hosts`` (other fields
    of that answer are ignored), so a real fleet's listing can be replayed."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: HostId
    capacity: Resources
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    overcommit: Overcommit = Field(default_factory=Overcommit)
    capabilities: list[str] = Field(
        default_factory=lambda: list(ALL_CAPABILITIES),
        description="what its agent declares beyond create and delete (migrate, power); default: all",
    )
    networks: list[str] = Field(default_factory=list, description="the networks it reaches")
    storage_pools: list[StoragePool] = Field(
        default_factory=list, description="the storage pools it reaches (local ones with capacity_gb)"
    )


class Profile(StrEnum):
    UNIFORM = "uniform"  # every host alike
    MIXED = "mixed"  # a seeded mix of host classes, some with GPUs


# (capacity, weight in a mixed fleet)
HOST_CLASSES: Mapping[str, tuple[Resources, int]] = {
    "small": (Resources(cpu=16, memory_mb=64 * 1024, disk_gb=500), 40),
    "medium": (Resources(cpu=32, memory_mb=128 * 1024, disk_gb=1000), 35),
    "large": (Resources(cpu=64, memory_mb=256 * 1024, disk_gb=2000), 15),
    "gpu": (Resources(cpu=64, memory_mb=512 * 1024, disk_gb=4000, gpu=8), 10),
}
SIZE_LABEL = "size"
ZONE_LABEL = "zone"

_HOST_LIST = TypeAdapter(list[HostSpec])


def host_id(prefix: str, index: int, count: int) -> str:
    """``<prefix>-0001``: 1-based, zero-padded to at least 4 digits so that ids sort in order."""
    return f"{prefix}-{index + 1:0{max(4, len(str(count)))}d}"


def zone_label(index: int, zones: int) -> dict[str, str]:
    """``zone=z1`` .. ``zone=zN``, round robin (empty when ``zones`` is 0)."""
    return {ZONE_LABEL: f"z{index % zones + 1}"} if zones > 0 else {}


def generate_hosts(
    count: int,
    *,
    prefix: str = "sim",
    capacity: Resources,
    profile: Profile = Profile.UNIFORM,
    labels: Mapping[str, str] | None = None,
    zones: int = 0,
    overcommit: Overcommit | None = None,
    seed: int = 0,
) -> list[HostSpec]:
    """``count`` hosts. ``uniform``: each with ``capacity``. ``mixed``: each drawn (with ``seed``)
    from :data:`HOST_CLASSES` and labelled ``size=<class>``; ``capacity`` is not used."""
    if count < 0 or zones < 0:
        raise ValueError("count and zones must not be negative")
    rng = random.Random(seed)
    names = list(HOST_CLASSES)
    weights = [HOST_CLASSES[name][1] for name in names]
    hosts = []
    for index in range(count):
        host_labels = {**(labels or {}), **zone_label(index, zones)}
        host_capacity = capacity
        if profile is Profile.MIXED:
            size = rng.choices(names, weights)[0]
            host_capacity = HOST_CLASSES[size][0]
            host_labels[SIZE_LABEL] = size
        hosts.append(
            HostSpec(
                id=host_id(prefix, index, count),
                capacity=host_capacity,
                labels=host_labels,
                overcommit=overcommit or Overcommit(),
            )
        )
    return hosts


def load_hosts(path: Path, *, labels: Mapping[str, str] | None = None, zones: int = 0) -> list[HostSpec]:
    """Hosts from a JSON file: an array of host objects, or one object a line. ``labels`` and
    the zone label are added to each host's own labels (its own win)."""
    text = path.read_text()
    stripped = text.lstrip()
    if stripped.startswith("["):
        hosts = _HOST_LIST.validate_json(text)
    else:
        hosts = [HostSpec.model_validate_json(line) for line in text.splitlines() if line.strip()]
    return [
        HostSpec.model_validate(
            {**host.model_dump(), "labels": {**(labels or {}), **zone_label(index, zones), **host.labels}}
        )
        for index, host in enumerate(hosts)
    ]


def parse_labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` as a dict (empty text: no labels)."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels


def dump_hosts(hosts: Sequence[HostSpec]) -> str:
    """The JSON :func:`load_hosts` reads."""
    return json.dumps([host.model_dump(mode="json") for host in hosts], indent=2)
