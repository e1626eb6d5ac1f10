"""The libvirt agent in the whole stack (API, scheduler, gateway on the real servers), each host a
libvirt test-driver host of our own (tests/agent/libvirt/node.xml), its agent enrolled as an
operator enrolls one: a VM asked for over HTTP runs as a domain, is deleted, and migrates live from
one libvirt host to another with the target's URI taken from its heartbeats (the migration itself
stood in for: the test driver cannot migrate; tests/agent/libvirt/fakes.py)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from devtools.stack import Stack
from tests.agent.libvirt.conftest import NODE_FILE, settings_for
from tests.agent.libvirt.fakes import MigratingHost
from tests.fleets import enroll
from tests.integration.moving import running
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.libvirt.host import VirtHost
from vmsched_agent.libvirt.ports import DomainState, NoSuchDomain
from vmsched_agent.libvirt.runner import LibvirtAgent


@dataclass
class KvmHosts:
    suite: str
    ids: list[str]
    uris: dict[str, str]  # host id -> its libvirt URI (and migration URI)
    libvirt: dict[str, MigratingHost]  # by URI: each host's libvirt, as its agent holds it
    agents: dict[str, LibvirtAgent]

    def host(self, host_id: str) -> MigratingHost:
        return self.libvirt[self.uris[host_id]]


@pytest.fixture(scope="module")
async def kvm(stack: Stack, servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KvmHosts]:
    suite = f"kvm{uuid.uuid4().hex[:6]}"
    ids = [f"{suite}-a", f"{suite}-b"]
    folder = tmp_path_factory.mktemp("kvm-hosts")
    uris: dict[str, str] = {}
    libvirt: dict[str, MigratingHost] = {}
    for host_id in ids:
        path = folder / f"{host_id}.xml"
        shutil.copy(NODE_FILE, path)
        uris[host_id] = f"test://{path}"
        libvirt[uris[host_id]] = MigratingHost(VirtHost.open(uris[host_id]), libvirt)
    enrolled = await enroll(servers, ids)  # as `vmsched-gateway enroll-agent <id>` does
    agents = {
        host_id: LibvirtAgent(
            settings_for(uris[host_id], host_id, labels=f"suite={suite}", migration_uri=uris[host_id]),
            amqp_url=enrolled[host_id].amqp_url,
            opener=libvirt.__getitem__,
            heartbeat_interval=1.0,
            queue_wait_timeout=60.0,
        )
        for host_id in ids
    }
    for agent in agents.values():
        await agent.start()
    try:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in ids and h["status"] == "online") == 2,
                timeout=60,
                what="the libvirt hosts online",
            )
        yield KvmHosts(suite, ids, uris, libvirt, agents)
    finally:
        for agent in agents.values():
            await agent.stop()
        for host in libvirt.values():
            VirtHost.close(host)


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


def _state(host: MigratingHost, vm_id: str) -> DomainState | None:
    try:
        return host.state(vm_id)
    except NoSuchDomain:
        return None


async def _pause(api: httpx.AsyncClient, kvm: KvmHosts, *paused: str) -> None:
    for host_id in kvm.ids:
        response = await api.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": host_id in paused})
        assert response.status_code == 200, response.text


async def test_a_vm_asked_for_over_http_runs_as_a_libvirt_domain_and_its_delete_removes_it(
    api: httpx.AsyncClient, kvm: KvmHosts
) -> None:
    vm = await running(
        api, {"name": f"{kvm.suite}-web", "cpu": 2, "memory_mb": 1024, "disk_gb": 20, "labels": {"suite": kvm.suite}}
    )
    host = kvm.host(vm["hypervisor_id"])
    domain = next(d for d in host.domains() if d.name == vm["id"])
    volume = host.volume("vmsched", f"{vm['id']}.qcow2")

    response = await api.delete(f"/v1/vms/{vm['id']}")
    assert response.status_code == 202, response.text
    await eventually(
        lambda: api.get(f"/v1/vms/{vm['id']}"),
        lambda r: r.json()["status"] == "deleted",
        timeout=30,
        what="the VM deleted",
    )

    assert (domain.active, domain.vcpus, domain.memory_kib) == (True, 2, 1024 * 1024)
    assert volume is not None
    assert volume.capacity_bytes == 20 << 30
    assert _state(host, vm["id"]) is None
    assert host.volume("vmsched", f"{vm['id']}.qcow2") is None


async def test_a_vm_migrates_live_to_the_uri_the_target_announces_in_its_heartbeats(
    api: httpx.AsyncClient, kvm: KvmHosts, servers: Servers
) -> None:
    source, target = kvm.ids
    await _pause(api, kvm, target)
    try:
        vm = await running(
            api,
            {"name": f"{kvm.suite}-move", "cpu": 1, "memory_mb": 512, "disk_gb": 10, "labels": {"suite": kvm.suite}},
        )
    finally:
        await _pause(api, kvm)
    assert vm["hypervisor_id"] == source

    response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": target})
    assert response.status_code == 202, response.text
    moved = await eventually(
        lambda: api.get(f"/v1/vms/{vm['id']}"),
        lambda r: r.json()["status"] == "running" and r.json()["hypervisor_id"] == target,
        timeout=60,
        what="the VM running on the target",
    )

    assert moved.json()["hypervisor_id"] == target
    assert [(name, uri) for name, uri, _ in kvm.host(source).migrations] == [(vm["id"], kvm.uris[target])]
    assert _state(kvm.host(target), vm["id"]) is DomainState.RUNNING
    await eventually(  # cleanup_migration follows the VM's move: nothing of it stays on the source
        lambda: _async(_state(kvm.host(source), vm["id"])),
        lambda state: state is None,
        timeout=30,
        what="the source's copy removed",
    )
    assert kvm.host(source).volume("vmsched", f"{vm['id']}.qcow2") is None
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        announced = await conn.fetchval("SELECT migration_uri FROM hosts WHERE id = $1", target)
    finally:
        await conn.close()
    assert announced == kvm.uris[target]
    await api.delete(f"/v1/vms/{vm['id']}")


async def _async(value: DomainState | None) -> DomainState | None:
    return value
