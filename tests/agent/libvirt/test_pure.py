"""The libvirt agent's pure parts, without libvirt: the template, the inventory, the usage meter,
the room check and the settings."""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from vmsched_agent.libvirt import inventory
from vmsched_agent.libvirt.lifecycle import NoRoom, check_room
from vmsched_agent.libvirt.ports import DomainFacts, DomainSample, NodeInfo, PciAddress, PoolInfo
from vmsched_agent.libvirt.settings import load
from vmsched_agent.libvirt.template import (
    METADATA_NAMESPACE,
    Backing,
    Disk,
    DomainSpec,
    DomainTemplate,
    TemplateError,
    hostdev_addresses,
    metadata_disk,
    volume_xml,
)
from vmsched_agent.libvirt.usage import UsageMeter
from vmsched_contract.messages import Resources, Usage

GIB = 1 << 30
VM_ID = uuid.UUID("6c9b8a1e-1111-4a4a-9c9c-123456789abc")


def spec(**changes: object) -> DomainSpec:
    values: dict[str, object] = {
        "vm_id": VM_ID,
        "title": "web <1> & 'friends'",
        "vcpus": 2,
        "memory_mib": 1024,
        "domain_type": "kvm",
        "disk": Disk("default", f"{VM_ID}.qcow2"),
        "volume_format": "qcow2",
        "network": "default",
        "host_id": "hv-0001",
    }
    return DomainSpec(**{**values, **changes})  # type: ignore[arg-type]


def test_the_shipped_template_renders_a_kvm_domain_named_by_the_vm_with_its_disk_and_metadata() -> None:
    domain = ElementTree.fromstring(DomainTemplate.load().render(spec()))

    assert domain.get("type") == "kvm"
    assert domain.findtext("name") == domain.findtext("uuid") == str(VM_ID)
    assert domain.findtext("title") == "web <1> & 'friends'"
    assert (domain.findtext("vcpu"), domain.findtext("memory")) == ("2", "1024")
    source = domain.find("./devices/disk/source")
    assert source is not None
    assert source.attrib == {"pool": "default", "volume": f"{VM_ID}.qcow2"}
    volume = domain.find(f"./metadata/{{{METADATA_NAMESPACE}}}vm/{{{METADATA_NAMESPACE}}}volume")
    assert volume is not None
    assert volume.attrib == {"pool": "default", "name": f"{VM_ID}.qcow2"}
    assert domain.find("./devices/hostdev") is None


def test_an_operators_template_gets_the_name_uuid_metadata_and_gpus_whatever_it_says(tmp_path: Path) -> None:
    path = tmp_path / "mine.xml"
    path.write_text("<domain type='$domain_type'><name>mine</name><memory>$memory_mib</memory></domain>")
    gpu = PciAddress(domain=0, bus=0x3B, slot=0, function=1)

    rendered = DomainTemplate.load(path).render(spec(gpus=(gpu,)))

    domain = ElementTree.fromstring(rendered)
    assert domain.findtext("name") == domain.findtext("uuid") == str(VM_ID)
    assert hostdev_addresses(rendered) == [gpu]
    ours = domain.find(f"./metadata/{{{METADATA_NAMESPACE}}}vm")
    assert ours is not None
    disk = metadata_disk(ElementTree.tostring(ours, encoding="unicode"))
    assert disk == Disk("default", f"{VM_ID}.qcow2")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<domain><name>$nmae</name></domain>", "unknown placeholder $nmae"),
        ("<domain><name>$name</name>", "not well-formed XML"),
        ("<volume><name>$name</name></volume>", "the root element is <volume>, not <domain>"),
        ("<domain><description>costs 5$</description></domain>", "write $$ for a dollar sign"),
    ],
)
def test_a_broken_template_is_refused_when_loaded(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "broken.xml"
    path.write_text(text)

    with pytest.raises(TemplateError, match=reason.replace("$", r"\$")):
        DomainTemplate.load(path)


def test_a_volume_is_thin_of_the_size_asked_on_its_base_image_when_one_is_given() -> None:
    volume = ElementTree.fromstring(volume_xml("v.qcow2", 20, "qcow2", Backing("/images/debian.qcow2", "qcow2")))
    raw = ElementTree.fromstring(volume_xml("v.img", 20, "raw"))

    assert (volume.findtext("capacity"), volume.find("capacity").get("unit"), volume.findtext("allocation")) == (  # type: ignore[union-attr]
        "20",
        "G",
        "0",
    )
    assert volume.findtext("./backingStore/path") == "/images/debian.qcow2"
    assert raw.find("target") is None  # raw: no format element (a logical pool refuses one)


PCI = """<device><name>{name}</name><capability type='pci'><class>{klass}</class><domain>0</domain>
<bus>{bus}</bus><slot>0</slot><function>0</function></capability></device>"""


def test_gpus_are_the_nodes_display_controllers() -> None:
    devices = [
        PCI.format(name="gpu-b", klass="0x030200", bus=0x86),
        PCI.format(name="nic", klass="0x020000", bus=0x3B),
        PCI.format(name="gpu-a", klass="0x030000", bus=0x1A),
        "<device><name>computer</name><capability type='system'/></device>",
    ]

    assert inventory.gpu_addresses(devices) == [PciAddress(0, 0x1A, 0, 0), PciAddress(0, 0x86, 0, 0)]


def _capabilities(*types: str, os_type: str = "hvm") -> str:
    domains = "".join(f"<domain type='{t}'/>" for t in types)
    return (
        f"<capabilities><guest><os_type>{os_type}</os_type><arch name='x86_64'>{domains}</arch></guest></capabilities>"
    )


def test_the_domain_type_is_kvm_where_offered_else_qemu() -> None:
    assert inventory.domain_type(_capabilities("qemu", "kvm")) == "kvm"
    assert inventory.domain_type(_capabilities("qemu")) == "qemu"
    with pytest.raises(inventory.NoDomainType, match="no domain type for hardware-virtualised"):
        inventory.domain_type(_capabilities("kvm", os_type="xen"))


def test_capacity_is_the_nodes_cpus_and_memory_and_the_pools_whole_gib() -> None:
    pool = PoolInfo("default", "dir", capacity_bytes=500 * GIB + 7, available_bytes=GIB, allocated_bytes=0)

    assert inventory.capacity(NodeInfo(cpus=64, memory_mib=262_144), pool, 2) == Resources(
        cpu=64, memory_mb=262_144, disk_gb=500, gpu=2
    )


def test_only_domains_named_by_a_vm_id_with_the_agents_metadata_are_vmscheds() -> None:
    ours = DomainFacts(str(VM_ID), str(VM_ID), active=False, vcpus=1, memory_kib=1024, metadata="<vm/>")
    unmarked = DomainFacts(str(uuid.uuid4()), "u", active=True, vcpus=1, memory_kib=1024, metadata=None)
    named = DomainFacts("web", "w", active=True, vcpus=1, memory_kib=1024, metadata="<vm/>")

    found = inventory.split([ours, unmarked, named])

    assert found.vm_ids == {VM_ID}
    assert found.stopped == {VM_ID}
    assert found.foreign == [unmarked, named]


def test_usage_is_cpu_time_over_wall_time_and_memory_held_from_the_second_sample() -> None:
    meter = UsageMeter(cpus=4)

    first = meter.measure(10.0, [DomainSample("a", 0, 1024 * 1024)])
    second = meter.measure(12.0, [DomainSample("a", 3_000_000_000, 1024 * 1024), DomainSample("b", 50, 512 * 1024)])
    third = meter.measure(13.0, [DomainSample("a", 3_000_000_000, 0), DomainSample("b", 9_000_000_050, 0)])

    assert first is None  # a rate needs two samples
    assert second == Usage(cpu_used=1.5, memory_used_mb=1536)  # b is new: its memory only
    assert third == Usage(cpu_used=4.0, memory_used_mb=0)  # 9 cores busy in a second: more than the host has


def test_a_pool_without_room_says_how_much_there_is() -> None:
    pool = PoolInfo("images", "dir", capacity_bytes=100 * GIB, available_bytes=90 * GIB, allocated_bytes=70 * GIB)

    check_room(pool, 30)
    with pytest.raises(NoRoom, match=r"^no room in pool images: disk: needs 31 GiB, 30 GiB free \(100 GiB total"):
        check_room(pool, 31)


def test_settings_come_from_the_environment_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMSCHED_LIBVIRT_URI", "qemu:///system")
    monkeypatch.setenv("VMSCHED_LIBVIRT_HOST_ID", "hv-0001")
    monkeypatch.setenv("VMSCHED_LIBVIRT_LABELS", "zone=z1,rack=r7")
    monkeypatch.setenv("VMSCHED_LIBVIRT_POOL", "images")

    settings = load({"pool": "fast", "network": None})

    assert (settings.uri, settings.host_id, settings.pool, settings.network) == (
        "qemu:///system",
        "hv-0001",
        "fast",
        "default",
    )
    assert settings.labels == {"zone": "z1", "rack": "r7"}


def test_bad_settings_are_named_by_flag_or_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VMSCHED_LIBVIRT_URI", raising=False)
    monkeypatch.setenv("VMSCHED_LIBVIRT_HOST_ID", "hv 1")

    with pytest.raises(ValueError, match="invalid configuration") as refused:
        load({"volume_format": "vmdk"})

    message = str(refused.value)
    assert "--uri or VMSCHED_LIBVIRT_URI: required" in message
    assert "VMSCHED_LIBVIRT_HOST_ID: String should match pattern" in message
    assert "--volume-format: Input should be 'qcow2' or 'raw'" in message
