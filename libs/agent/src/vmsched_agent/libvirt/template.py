"""The XML the agent hands libvirt: a VM's domain, from a template of our own (``domain.xml`` beside
this module, or the operator's copy), and its disk's volume.

The template is ``string.Template`` text (``$name``, ``$vcpus``, ...: the placeholders are listed in
``domain.xml``). What the agent relies on is then set whatever the template says: the domain's name
and UUID (the VM id: how the agent finds its domains again after a restart), the agent's
``<metadata>`` element (which domains are vmsched's, and which volume is each one's disk) and one
``<hostdev>`` per GPU the VM was given. Pure: no libvirt, no I/O but reading the template file.
"""

from __future__ import annotations

import string
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from vmsched_agent.libvirt.ports import PciAddress

# The agent's metadata element in each domain it defines (libvirt keeps one element per namespace).
METADATA_NAMESPACE = "urn:vmsched:libvirt-agent:1"
METADATA_PREFIX = "vmsched"
# Namespaces operators' templates commonly use, kept under their usual prefixes when re-serialised.
_KNOWN_PREFIXES = {
    METADATA_PREFIX: METADATA_NAMESPACE,
    "qemu": "http://libvirt.org/schemas/domain/qemu/1.0",
    "libosinfo": "http://libosinfo.org/xmlns/libvirt/domain/1.0",
}
for _prefix, _uri in _KNOWN_PREFIXES.items():
    ElementTree.register_namespace(_prefix, _uri)

SHIPPED_TEMPLATE = Path(__file__).with_name("domain.xml")
# What each volume format's file is called (a logical pool takes raw volumes only).
VOLUME_SUFFIX = {"qcow2": ".qcow2", "raw": ".img"}


class TemplateError(ValueError):
    """The template names a placeholder the agent does not fill, or is not a domain's XML."""


@dataclass(frozen=True, slots=True)
class Disk:
    """Where a VM's disk lives: a volume of a storage pool."""

    pool: str
    volume: str


@dataclass(frozen=True, slots=True)
class DomainSpec:
    """Everything a VM's domain is made of."""

    vm_id: UUID
    title: str
    vcpus: int
    memory_mib: int
    domain_type: str
    disk: Disk
    volume_format: str
    network: str
    host_id: str
    gpus: tuple[PciAddress, ...] = ()


@dataclass(frozen=True, slots=True)
class Backing:
    """A base image the VM's volume starts as a copy-on-write layer of (its path and format)."""

    path: str
    format: str


def volume_name(vm_id: UUID, volume_format: str) -> str:
    return f"{vm_id}{VOLUME_SUFFIX[volume_format]}"


def volume_xml(name: str, size_gib: int, volume_format: str, backing: Backing | None = None) -> str:
    """A volume of ``size_gib`` GiB (libvirt's ``G`` is 2^30 bytes), allocated as it is written."""
    volume = ElementTree.Element("volume")
    ElementTree.SubElement(volume, "name").text = name
    ElementTree.SubElement(volume, "capacity", unit="G").text = str(size_gib)
    ElementTree.SubElement(volume, "allocation").text = "0"
    if volume_format != "raw":  # raw is every pool's default; a logical pool refuses any format element
        target = ElementTree.SubElement(volume, "target")
        ElementTree.SubElement(target, "format", type=volume_format)
    if backing is not None:
        store = ElementTree.SubElement(volume, "backingStore")
        ElementTree.SubElement(store, "path").text = backing.path
        ElementTree.SubElement(store, "format", type=backing.format)
    return ElementTree.tostring(volume, encoding="unicode")


class DomainTemplate:
    """A domain template, checked when loaded (:meth:`check`)."""

    def __init__(self, text: str, source: str = "the shipped template") -> None:
        self.source = source
        self._template = string.Template(text)

    @classmethod
    def load(cls, path: Path | None = None) -> DomainTemplate:
        """The operator's template at ``path``, or the shipped one; raises :class:`TemplateError`
        (or OSError) if it cannot be used."""
        chosen = path or SHIPPED_TEMPLATE
        template = cls(chosen.read_text(), source=str(chosen))
        template.check()
        return template

    def check(self) -> None:
        """Render a sample VM, so that a broken template stops the agent at start-up rather than
        failing every create."""
        sample = DomainSpec(
            vm_id=UUID(int=0),
            title="sample",
            vcpus=1,
            memory_mib=512,
            domain_type="kvm",
            disk=Disk("pool", "volume"),
            volume_format="qcow2",
            network="default",
            host_id="host",
        )
        self.render(sample)

    def render(self, spec: DomainSpec) -> str:
        """The domain's XML for ``spec``; raises :class:`TemplateError`."""
        values = {
            "name": str(spec.vm_id),
            "uuid": str(spec.vm_id),
            "title": spec.title,
            "vcpus": str(spec.vcpus),
            "memory_mib": str(spec.memory_mib),
            "domain_type": spec.domain_type,
            "pool": spec.disk.pool,
            "volume": spec.disk.volume,
            "volume_format": spec.volume_format,
            "network": spec.network,
        }
        try:
            text = self._template.substitute({key: _escaped(value) for key, value in values.items()})
        except KeyError as error:
            raise TemplateError(f"{self.source}: unknown placeholder ${error.args[0]}") from None
        except ValueError as error:  # a lone $ or a bad name after it
            raise TemplateError(f"{self.source}: {error} (write $$ for a dollar sign)") from None
        try:
            domain = ElementTree.fromstring(text)
        except ElementTree.ParseError as error:
            raise TemplateError(f"{self.source}: not well-formed XML: {error}") from None
        if domain.tag != "domain":
            raise TemplateError(f"{self.source}: the root element is <{domain.tag}>, not <domain>")
        _set_child(domain, "name", str(spec.vm_id))
        _set_child(domain, "uuid", str(spec.vm_id))
        _set_metadata(domain, spec)
        _add_gpus(domain, spec.gpus)
        return ElementTree.tostring(domain, encoding="unicode")


def metadata_disk(metadata: str) -> Disk | None:
    """The disk the agent's metadata element (as libvirt returns it) names, if any."""
    try:
        element = ElementTree.fromstring(metadata)
    except ElementTree.ParseError:
        return None
    volume = next((child for child in element if _local(child.tag) == "volume"), None)
    if volume is None or not volume.get("pool") or not volume.get("name"):
        return None
    return Disk(pool=str(volume.get("pool")), volume=str(volume.get("name")))


def hostdev_addresses(domain_xml: str) -> list[PciAddress]:
    """The PCI devices a domain's XML hands to its guest."""
    found = []
    for address in ElementTree.fromstring(domain_xml).iterfind("./devices/hostdev[@type='pci']/source/address"):
        try:
            found.append(
                PciAddress(
                    domain=int(address.get("domain", "0"), 0),
                    bus=int(address.get("bus", "0"), 0),
                    slot=int(address.get("slot", "0"), 0),
                    function=int(address.get("function", "0"), 0),
                )
            )
        except ValueError:
            continue  # not an address we could hand out anyway
    return found


def _escaped(value: str) -> str:
    # Placeholders sit in text and in attributes quoted either way.
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )


def _set_child(parent: ElementTree.Element, tag: str, text: str) -> None:
    child = parent.find(tag)
    if child is None:
        child = ElementTree.Element(tag)
        parent.insert(0, child)
    child.text = text


def _set_metadata(domain: ElementTree.Element, spec: DomainSpec) -> None:
    metadata = domain.find("metadata")
    if metadata is None:
        metadata = ElementTree.SubElement(domain, "metadata")
    ours = f"{{{METADATA_NAMESPACE}}}"
    for old in [child for child in metadata if child.tag.startswith(ours)]:
        metadata.remove(old)
    element = ElementTree.SubElement(metadata, f"{ours}vm")
    ElementTree.SubElement(element, f"{ours}name").text = spec.title
    ElementTree.SubElement(element, f"{ours}host").text = spec.host_id
    ElementTree.SubElement(element, f"{ours}volume", pool=spec.disk.pool, name=spec.disk.volume)


def _add_gpus(domain: ElementTree.Element, gpus: Sequence[PciAddress]) -> None:
    if not gpus:
        return
    devices = domain.find("devices")
    if devices is None:
        devices = ElementTree.SubElement(domain, "devices")
    for gpu in gpus:
        hostdev = ElementTree.SubElement(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
        source = ElementTree.SubElement(hostdev, "source")
        ElementTree.SubElement(
            source,
            "address",
            domain=f"0x{gpu.domain:04x}",
            bus=f"0x{gpu.bus:02x}",
            slot=f"0x{gpu.slot:02x}",
            function=f"0x{gpu.function:x}",
        )


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]
