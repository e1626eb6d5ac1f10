"""What a libvirt host offers and holds, from what libvirt says of it: its capacity, its GPUs, the
domain type to ask for, and which of its domains are vmsched's. Pure: libvirt's answers in, facts out.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from uuid import UUID

from vmsched_agent.libvirt.ports import BYTES_PER_GIB, DomainFacts, NodeInfo, PciAddress, PoolInfo
from vmsched_contract.messages import Resources

# PCI class 0x03: display controllers (VGA 0x0300, 3D 0x0302, ...): what Nova and Kubernetes' device
# plugins count as GPUs.
_DISPLAY_CLASS = 0x03
# The domain types a hardware-virtualised guest can have, best first (test: libvirt's test driver).
_DOMAIN_TYPES = ("kvm", "qemu", "test")


class NoDomainType(ValueError):
    """The host offers no domain type for hardware-virtualised (hvm) guests."""


def capacity(node: NodeInfo, pool: PoolInfo, gpus: int) -> Resources:
    """What the host offers vmsched: the node's processors and memory, the pool's size (whole GiB),
    its GPUs."""
    return Resources(
        cpu=node.cpus,
        memory_mb=node.memory_mib,
        disk_gb=pool.capacity_bytes // BYTES_PER_GIB,
        gpu=gpus,
    )


def gpu_addresses(pci_device_xmls: Iterable[str]) -> list[PciAddress]:
    """The node's display controllers (``virNodeDeviceGetXMLDesc`` of its PCI devices), sorted."""
    found = []
    for text in pci_device_xmls:
        pci = ElementTree.fromstring(text).find("./capability[@type='pci']")
        if pci is None:
            continue
        try:
            if int(pci.findtext("class", "0"), 0) >> 16 != _DISPLAY_CLASS:
                continue
            found.append(
                PciAddress(
                    domain=int(pci.findtext("domain", "0"), 0),
                    bus=int(pci.findtext("bus", "0"), 0),
                    slot=int(pci.findtext("slot", "0"), 0),
                    function=int(pci.findtext("function", "0"), 0),
                )
            )
        except ValueError:
            continue  # a device libvirt describes oddly is not one to hand out
    return sorted(found)


def domain_type(capabilities_xml: str) -> str:
    """The best domain type the host offers hvm guests: kvm, else qemu (emulation, slow), else the
    test driver's. Raises :class:`NoDomainType`."""
    offered = {
        domain.get("type", "")
        for guest in ElementTree.fromstring(capabilities_xml).iterfind("guest")
        if guest.findtext("os_type") == "hvm"
        for domain in guest.iterfind("./arch/domain")
    }
    for choice in _DOMAIN_TYPES:
        if choice in offered:
            return choice
    raise NoDomainType(
        "the host offers no domain type for hardware-virtualised (hvm) guests: is KVM or QEMU installed, "
        "and is this the system libvirt (qemu:///system)?"
    )


@dataclass(frozen=True, slots=True)
class Domains:
    """A host's domains, split: vmsched's (named by a VM id, with the agent's metadata) by VM id,
    and the others (the operator's own, or another tool's), which the agent never touches."""

    vmsched: dict[UUID, DomainFacts]
    foreign: list[DomainFacts]

    @property
    def vm_ids(self) -> set[UUID]:
        return set(self.vmsched)

    @property
    def stopped(self) -> set[UUID]:
        """vmsched's domains that are defined but not running (powered off)."""
        return {vm_id for vm_id, domain in self.vmsched.items() if not domain.active}


def split(domains: Sequence[DomainFacts]) -> Domains:
    vmsched: dict[UUID, DomainFacts] = {}
    foreign: list[DomainFacts] = []
    for domain in domains:
        vm_id = _vm_id(domain.name)
        if vm_id is not None and domain.metadata is not None:
            vmsched[vm_id] = domain
        else:
            foreign.append(domain)
    return Domains(vmsched, foreign)


def _vm_id(name: str) -> UUID | None:
    try:
        vm_id = UUID(name)
    except ValueError:
        return None
    return vm_id if str(vm_id) == name else None
