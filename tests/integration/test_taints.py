"""Taints, tolerations and the GPU weigher end to end through the API on the real servers: a GPU host
tainted gpu=true:NoSchedule keeps ordinary VMs off it while a tolerating VM lands; untainted, it is
still left to the VMs that ask for GPUs while another host fits."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources, Taint, TaintEffect

GPU_TAINT = Taint(key="gpu", value="true", effect=TaintEffect.NO_SCHEDULE)


def test_tolerations_are_validated_and_kept_with_the_vm(api: httpx.Client) -> None:
    body = {"name": "tolerant", "cpu": 1, "memory_mb": 64, "disk_gb": 0, "labels": {"suite": "no-such-host"}}
    bad = api.post("/v1/vms", json={**body, "tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"][:3] == ["body", "tolerations", 0]
    assert "Exists takes no value" in bad.json()["detail"][0]["msg"]
    anything = [{"operator": "Exists"}, {"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    created = api.post("/v1/vms", json={**body, "tolerations": anything})
    assert created.status_code == 202, created.text
    stored = api.get(f"/v1/vms/{created.json()['id']}").json()
    assert stored["tolerations"] == [
        {"key": "", "operator": "Exists", "value": "", "effect": None},
        {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ]


async def test_a_tainted_gpu_host_takes_only_tolerating_vms_and_untainted_is_kept_for_gpu_vms(
    stack: Stack, servers: Servers
) -> None:
    suite = f"taint-{uuid.uuid4().hex[:6]}"
    gpu_host, plain_host = f"{suite}-a", f"{suite}-b"  # the GPU host has the lower id: ties go to it
    hosts = [
        HostSpec(
            id=gpu_host,
            capacity=Resources(cpu=16, memory_mb=65536, disk_gb=100, gpu=2),
            labels={"suite": suite},
            taints=[GPU_TAINT],  # reported by its agent
        ),
        HostSpec(id=plain_host, capacity=Resources(cpu=4, memory_mb=16384, disk_gb=100), labels={"suite": suite}),
    ]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    placed: list[str] = []
    async with fleet, stack.async_client(timeout=30) as api:
        for host_id in (gpu_host, plain_host):
            await eventually(
                lambda host_id=host_id: api.get(f"/v1/hosts/{host_id}"),  # type: ignore[misc]
                lambda r: r.status_code == 200 and r.json()["status"] == "online",
                timeout=30,
                what=f"{host_id} online",
            )
        assert (await api.get(f"/v1/hosts/{gpu_host}")).json()["taints"] == [GPU_TAINT.model_dump(mode="json")]

        ordinary = await _place(api, suite, "ordinary-1", cpu=1)
        placed.append(ordinary["id"])
        assert ordinary["hypervisor_id"] == plain_host
        decision = (await api.get(f"/v1/vms/{ordinary['id']}/placement")).json()["decision"]
        assert decision["rejections"]["taints"] == 1

        # Too big for the plain host: the tainted one would fit, but does not take it.
        refused = await _place(api, suite, "ordinary-big", cpu=8)
        assert refused["status"] == "unschedulable"
        assert "taints: 1" in refused["status_reason"]

        tolerating = await _place(
            api, suite, "trainer", cpu=1, gpu=1, tolerations=[{"key": "gpu", "operator": "Exists"}]
        )
        placed.append(tolerating["id"])
        assert tolerating["hypervisor_id"] == gpu_host

        # The operator lifts the taint; VMs without GPUs still go elsewhere while another host fits.
        lifted = await api.patch(f"/v1/hosts/{gpu_host}", json={"taints": []})
        assert lifted.status_code == 200
        assert lifted.json()["taints"] == []
        kept_off = await _place(api, suite, "ordinary-2", cpu=1)
        placed.append(kept_off["id"])
        assert kept_off["hypervisor_id"] == plain_host  # busier (1 of 4 cpus against 1 of 16), yet preferred
        decision = (await api.get(f"/v1/vms/{kept_off['id']}/placement")).json()["decision"]
        assert decision["preferences"] == {"gpu_affinity": 1}
        assert decision["preferred"] == 1
        assert decision["eligible"] == 2
        # A preference never rejects: what fits only on the GPU host goes there.
        only_there = await _place(api, suite, "ordinary-big-2", cpu=8)
        placed.append(only_there["id"])
        assert only_there["hypervisor_id"] == gpu_host

        for vm_id in placed:
            assert (await api.delete(f"/v1/vms/{vm_id}")).status_code == 202
        for vm_id in placed:
            await eventually(
                lambda vm_id=vm_id: api.get(f"/v1/vms/{vm_id}"),  # type: ignore[misc]
                lambda r: r.json()["status"] == "deleted",
                timeout=30,
                what="the VM deleted",
            )


async def _place(api: httpx.AsyncClient, suite: str, name: str, **asked: Any) -> dict[str, Any]:
    body = {"name": f"{suite}-{name}", "memory_mb": 1024, "disk_gb": 1, "labels": {"suite": suite}, **asked}
    created = await api.post("/v1/vms", json=body)
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["status"] != "pending",
        timeout=30,
        what=f"{name} decided",
    )
    vm: dict[str, Any] = found.json()
    return vm
