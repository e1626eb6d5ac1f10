"""What the libvirt agent needs of a libvirt connection, as typed values and one Protocol.

libvirt-python is untyped and blocking; :mod:`vmsched_agent.libvirt.host` is the only module that
imports it, and it implements :class:`LibvirtHost` below. Everything else (the hypervisor, the
inventory, the usage meter) is written against this Protocol, so a test can stand in for the one
call libvirt's test driver lacks (migration) and keep the rest real. Every method blocks: call them
through :class:`vmsched_agent.libvirt.connection.LibvirtConnection`, never on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

# libvirt reports memory in KiB and volumes in bytes; vmsched counts MiB and GiB.
KIB_PER_MIB = 1024
BYTES_PER_GIB = 1 << 30


class HostError(Exception):
    """A libvirt call failed: ``str(error)`` is libvirt's own message. ``connection_lost``: the
    connection itself is gone (the daemon died or the link broke), not just this call."""

    def __init__(self, message: str, *, code: int = 0, connection_lost: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.connection_lost = connection_lost


class NoSuchDomain(HostError):
    """The domain is not defined on this host."""


class DomainState(StrEnum):
    """A domain's state, as ``virDomainGetState`` names it."""

    NO_STATE = "nostate"
    RUNNING = "running"
    BLOCKED = "blocked"  # running, waiting on I/O
    PAUSED = "paused"
    SHUTTING_DOWN = "shutdown"
    SHUT_OFF = "shutoff"
    CRASHED = "crashed"
    SUSPENDED = "pmsuspended"

    @property
    def runs(self) -> bool:
        return self in (DomainState.RUNNING, DomainState.BLOCKED)

    @property
    def active(self) -> bool:
        """Has a running process (anything but shut off or crashed): destroy it before undefining."""
        return self not in (DomainState.SHUT_OFF, DomainState.CRASHED)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The node's processors and memory, as ``virNodeGetInfo`` says."""

    cpus: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class PoolInfo:
    """A storage pool: its size, what is physically free, and what its volumes were given
    (``allocated_bytes``: the sum of their capacities, thin or not)."""

    name: str
    kind: str  # libvirt's pool type: dir, logical, rbd, netfs, ...
    capacity_bytes: int
    available_bytes: int
    allocated_bytes: int


@dataclass(frozen=True, slots=True)
class DomainFacts:
    """One domain as the inventory sees it. ``metadata`` is the agent's own metadata element
    (:data:`vmsched_agent.libvirt.template.METADATA_NAMESPACE`) as XML, None on a domain this agent
    did not create."""

    name: str
    uuid: str
    active: bool
    vcpus: int
    memory_kib: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class DomainSample:
    """A running domain's counters at one moment: CPU time used since it started, memory in use."""

    name: str
    cpu_time_ns: int
    memory_kib: int


@dataclass(frozen=True, slots=True)
class VolumeInfo:
    """A volume: where it is and how it is stored (a base image's, for a VM's volume to start from)."""

    name: str
    path: str
    format: str
    capacity_bytes: int


@dataclass(frozen=True, slots=True)
class MigrationFlags:
    """How a live migration goes: ``copy_storage`` copies the disks too (storage that is not shared)."""

    copy_storage: bool


class LibvirtHost(Protocol):
    """One open libvirt connection (``qemu:///system``, ``test:///default``, ...). Every method
    raises :class:`HostError` with libvirt's message (:class:`NoSuchDomain` for a missing domain)."""

    uri: str

    def alive(self) -> bool: ...

    def close(self) -> None: ...

    # -- inventory -------------------------------------------------------------------------------
    def node_info(self) -> NodeInfo: ...

    def capabilities_xml(self) -> str: ...

    def pci_device_xmls(self) -> list[str]: ...

    def pool(self, name: str) -> PoolInfo: ...

    def pools(self) -> list[PoolInfo]: ...

    def networks(self) -> list[str]: ...

    def domains(self) -> list[DomainFacts]: ...

    def samples(self) -> list[DomainSample]: ...

    # -- domains ---------------------------------------------------------------------------------
    def domain_xml(self, name: str) -> str: ...

    def state(self, name: str) -> DomainState: ...

    def domain_metadata(self, name: str) -> str | None: ...

    def define(self, xml: str) -> None: ...

    def start(self, name: str) -> None: ...

    def shutdown(self, name: str) -> None: ...

    def destroy(self, name: str) -> None: ...

    def undefine(self, name: str) -> None: ...

    def migrate(self, name: str, target_uri: str, flags: MigrationFlags) -> None: ...

    # -- volumes ---------------------------------------------------------------------------------
    def create_volume(self, pool: str, xml: str) -> None: ...

    def delete_volume(self, pool: str, name: str) -> None: ...

    def volume(self, pool: str, name: str) -> VolumeInfo | None: ...


class OpensHosts(Protocol):
    """Opens a connection to the libvirt at ``uri`` (raises :class:`HostError`)."""

    def __call__(self, uri: str, /) -> LibvirtHost: ...


@dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    """A PCI device of the node (a GPU handed to a VM whole)."""

    domain: int
    bus: int
    slot: int
    function: int

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"
