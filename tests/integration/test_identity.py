"""Identity on the real stack: tokens made, shown once, listed without secrets and revoked on every
API replica; projects that see only their own VMs (another project's is a 404); the audit trail;
events that name the project; the first token from the command line."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import httpx
import pytest

from devtools.stack import BIN, Stack, api_client
from tests.integration.amqp_tools import wait_for_message
from tests.integration.conftest import stack_env
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_amqp import topology

NOWHERE = {"suite": "identity-nowhere"}  # no host has it: these VMs are never placed


def vm(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": NOWHERE, **extra}


async def new_project(admin: httpx.AsyncClient, **quota: int) -> str:
    name = f"p-{uuid.uuid4().hex[:10]}"
    created = await admin.post("/v1/projects", json={"name": name, "quota": quota})
    assert created.status_code == 201, created.text
    return name


async def new_token(admin: httpx.AsyncClient, project: str, *scopes: str, **extra: Any) -> dict[str, Any]:
    created = await admin.post(
        "/v1/tokens", json={"name": f"t-{uuid.uuid4().hex[:6]}", "project": project, "scopes": list(scopes), **extra}
    )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


async def test_a_token_is_shown_once_listed_without_its_secret_and_revoked_on_every_replica(
    stack: Stack, replica: Stack, admin: httpx.AsyncClient
) -> None:
    project = await new_project(admin)
    token = await new_token(admin, project, "vms:write")
    assert token["token"].startswith("vmsched_")
    assert (token["project"], token["scopes"], token["expires_at"]) == (project, ["vms:write"], None)
    listed = (await admin.get("/v1/tokens", params={"project": project})).json()
    assert [(t["id"], t["revoked_at"]) for t in listed] == [(token["id"], None)]
    assert token["token"] not in json.dumps(listed)
    assert "token" not in listed[0]

    async with (
        api_client(stack.api_url, token["token"], timeout=30) as on_a,
        api_client(replica.api_url, token["token"], timeout=30) as on_b,
    ):
        for api in (on_a, on_b):  # both replicas know it (and may have cached it)
            assert (await api.get("/v1/vms")).status_code == 200
        assert (await admin.delete(f"/v1/tokens/{token['id']}")).status_code == 204
        refused = await on_a.get("/v1/vms")
        assert refused.status_code == 401  # the revoking replica: at once
        assert refused.headers["WWW-Authenticate"] == 'Bearer realm="vmsched", error="invalid_token"'
        # The other: as soon as PostgreSQL's notice reaches it (milliseconds).
        await eventually(lambda: on_b.get("/v1/vms"), lambda r: r.status_code == 401, timeout=2, what="B refusing")
    revoked = (await admin.get(f"/v1/tokens/{token['id']}")).json()
    assert revoked["revoked_at"] is not None
    assert (await admin.delete(f"/v1/tokens/{uuid.uuid4()}")).status_code == 404


async def test_an_expired_token_and_a_token_of_no_project_are_refused(stack: Stack, admin: httpx.AsyncClient) -> None:
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    expired = await new_token(admin, "default", "vms:read", expires_at=past)
    async with api_client(stack.api_url, expired["token"]) as api:
        assert (await api.get("/v1/vms")).status_code == 401
    nowhere = await admin.post("/v1/tokens", json={"name": "x", "project": "no-such-project", "scopes": ["admin"]})
    assert nowhere.status_code == 422
    assert nowhere.json()["detail"][0]["loc"] == ["body", "project"]


async def test_a_project_sees_and_changes_only_its_own_vms_groups_and_reservations(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    mine, theirs = await new_project(admin), await new_project(admin)
    my_token = (await new_token(admin, mine, "vms:write"))["token"]
    their_token = (await new_token(admin, theirs, "vms:write"))["token"]
    async with (
        api_client(stack.api_url, my_token, timeout=30) as me,
        api_client(stack.api_url, their_token, timeout=30) as them,
    ):
        created = await me.post("/v1/vms", json=vm("mine"), headers={"Idempotency-Key": "shared-key"})
        assert created.status_code == 202, created.text
        assert (created.json()["project"], created.headers["Location"]) == (mine, f"/v1/vms/{created.json()['id']}")
        vm_id = created.json()["id"]
        group = (await me.post("/v1/server-groups", json={"name": "g", "policy": "anti-affinity"})).json()
        assert group["project"] == mine
        held = {"project": mine, "cpu": 1, "memory_mb": 256, "disk_gb": 1, "host_selector": [], "count": 1}
        reservation = (await admin.post("/v1/reservations", json={**held, "ends_at": None})).json()
        assert reservation["project"] == mine

        # Another project: not found, never forbidden (a 403 would confirm the VM exists).
        for method, path in [
            ("GET", f"/v1/vms/{vm_id}"),
            ("GET", f"/v1/vms/{vm_id}/placement"),
            ("GET", f"/v1/vms/{vm_id}/placement/replay"),
            ("DELETE", f"/v1/vms/{vm_id}"),
            ("POST", f"/v1/vms/{vm_id}/migrate"),
            ("POST", f"/v1/vms/{vm_id}/stop"),
            ("POST", f"/v1/vms/{vm_id}/start"),
            ("GET", f"/v1/server-groups/{group['id']}"),
            ("DELETE", f"/v1/server-groups/{group['id']}"),
            ("GET", f"/v1/projects/{mine}"),
            ("GET", f"/v1/reservations/{reservation['id']}"),
        ]:
            assert (await them.request(method, path)).status_code == 404, (method, path)
        assert vm_id not in {v["id"] for v in (await them.get("/v1/vms", params={"limit": 1000})).json()["items"]}
        assert (await them.get("/v1/vms", params={"project": mine})).json()["items"] == []
        assert group["id"] not in {g["id"] for g in (await them.get("/v1/server-groups")).json()}
        assert reservation["id"] not in {r["id"] for r in (await them.get("/v1/reservations")).json()}
        assert (await them.get("/v1/reservations", params={"project": mine})).json() == []
        # Making and ending reservations is an admin's: a project's own token may not.
        assert (await me.post("/v1/reservations", json=held)).status_code == 403
        assert (await me.delete(f"/v1/reservations/{reservation['id']}")).status_code == 403
        # Nor may it put a VM into the group, nor reach the VM through the same Idempotency-Key.
        joined = await them.post("/v1/vms", json={**vm("theirs"), "server_group": group["id"]})
        assert (joined.status_code, joined.json()["detail"][0]["type"]) == (422, "unknown_server_group")
        same_key = await them.post("/v1/vms", json=vm("mine"), headers={"Idempotency-Key": "shared-key"})
        assert same_key.status_code == 202
        assert same_key.json()["id"] != vm_id
        assert "Idempotent-Replayed" not in same_key.headers

        # Which hosts exist is the operators' to know: naming a migration's target needs hosts:admin.
        named = await me.post(f"/v1/vms/{vm_id}/migrate", json={"target_host": "any-host"})
        assert named.status_code == 403, named.text

        # The owner sees it; an admin sees every project, or one.
        assert (await me.get(f"/v1/vms/{vm_id}")).json()["project"] == mine
        listed = (await me.get("/v1/vms", params={"limit": 1000})).json()["items"]
        assert {v["project"] for v in listed} == {mine}
        assert (await admin.get(f"/v1/vms/{vm_id}")).status_code == 200
        filtered = (await admin.get("/v1/vms", params={"project": theirs, "limit": 1000})).json()["items"]
        assert [v["id"] for v in filtered] == [same_key.json()["id"]]
        assert (await me.get(f"/v1/projects/{mine}")).json()["name"] == mine
        assert (await me.get(f"/v1/reservations/{reservation['id']}")).json()["id"] == reservation["id"]
        assert [r["id"] for r in (await me.get("/v1/reservations")).json()] == [reservation["id"]]
        assert (await admin.delete(f"/v1/reservations/{reservation['id']}")).json()["status"] == "released"

        assert (await me.delete(f"/v1/vms/{vm_id}")).status_code == 202


async def test_a_project_shows_its_quota_and_what_its_vms_use(stack: Stack, admin: httpx.AsyncClient) -> None:
    project = await new_project(admin, instances=5, cpu=10, max_priority=100)
    assert (await admin.post("/v1/projects", json={"name": project})).status_code == 409
    token = (await new_token(admin, project, "vms:write"))["token"]
    async with api_client(stack.api_url, token, timeout=30) as api:
        # Waiting for room (no host has their label) they count, as long as they wait.
        ids = [(await api.post("/v1/vms", json=vm(f"u{i}", cpu=2, wait_s=600))).json()["id"] for i in range(2)]
        ended = (await api.post("/v1/vms", json=vm("ended"))).json()["id"]
        await eventually(
            lambda: api.get(f"/v1/vms/{ended}"),
            lambda r: r.json()["status"] == "unschedulable",
            timeout=30,
            what="the VM that may not wait to end unschedulable",
        )
        shown = (await api.get(f"/v1/projects/{project}")).json()
        assert shown["quota"] == {
            "instances": 5,
            "cpu": 10,
            "memory_mb": None,
            "disk_gb": None,
            "gpu": None,
            "max_priority": 100,
        }
        assert shown["usage"] == {"instances": 2, "cpu": 4, "memory_mb": 512, "disk_gb": 2, "gpu": 0}
        await api.delete(f"/v1/vms/{ids[0]}")  # never placed: deleted at once, and no longer counted
        assert (await api.get(f"/v1/projects/{project}")).json()["usage"]["instances"] == 1
        await api.delete(f"/v1/vms/{ids[1]}")
    assert project in {p["name"] for p in (await admin.get("/v1/projects")).json()}


async def test_the_audit_trail_lists_mutating_requests_newest_first_by_page(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    project = await new_project(admin)
    token = await new_token(admin, project, "vms:write")
    async with api_client(stack.api_url, token["token"], timeout=30) as api:
        created = (await api.post("/v1/vms", json=vm("audited"))).json()
        await api.get(f"/v1/vms/{created['id']}")  # a read: not on the trail
        assert (await api.put("/v1/settings/scheduler", json={"default_strategy": "best_fit"})).status_code == 403
        await api.delete(f"/v1/vms/{created['id']}")
    page = (await admin.get("/v1/audit", params={"project": project, "limit": 2})).json()
    older = (await admin.get("/v1/audit", params={"project": project, "cursor": page["next_cursor"]})).json()
    trail = [
        (e["token_id"], e["project"], e["action"], e["target"], e["status"]) for e in page["items"] + older["items"]
    ]
    assert trail == [
        (token["id"], project, "DELETE /v1/vms/{vm_id}", f"/v1/vms/{created['id']}", 202),
        (token["id"], project, "PUT /v1/settings/scheduler", "/v1/settings/scheduler", 403),
        (token["id"], project, "POST /v1/vms", f"/v1/vms/{created['id']}", 202),
    ]
    assert older["next_cursor"] is None
    by_admin = (await admin.get("/v1/audit", params={"token_id": "bootstrap", "limit": 1000})).json()["items"]
    assert any(e["action"] == "POST /v1/tokens" and e["target"] == f"/v1/tokens/{token['id']}" for e in by_admin)


async def test_events_name_the_project_of_the_vm(stack: Stack, servers: Servers, admin: httpx.AsyncClient) -> None:
    project = await new_project(admin)
    token = (await new_token(admin, project, "vms:write"))["token"]
    queue_name = f"test.identity-events-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, durable=False, auto_delete=False)
        await queue.bind(topology.EXCHANGE.name, routing_key=topology.VM_UNSCHEDULABLE)
        try:
            async with api_client(stack.api_url, token, timeout=30) as api:
                vm_id = (await api.post("/v1/vms", json=vm("eventful"))).json()["id"]
            message = await wait_for_message(servers.amqp_url, queue_name, lambda m: vm_id.encode() in m.body)
        finally:
            await queue.delete(if_unused=False, if_empty=False)
    (unplaced,) = [item for item in json.loads(message.body)["vms"] if item["vm_id"] == vm_id]
    assert unplaced["project"] == project


def create_token(servers: Servers, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "vmsched-api"), "create-token", *args],
        env={**stack_env(servers), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_first_token_comes_from_the_command_line(stack: Stack, servers: Servers) -> None:
    # Both at once (neither needs the other): each is a process that takes a second or two to start.
    made, refused = await asyncio.gather(
        asyncio.to_thread(create_token, servers, "--project", "default", "--scope", "vms:read"),
        asyncio.to_thread(create_token, servers, "--project", "nope", "--scope", "admin"),
    )
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("vmsched_")
    async with api_client(stack.api_url, secret, timeout=30) as api:
        assert (await api.get("/v1/vms", params={"limit": 1})).status_code == 200
        assert (await api.post("/v1/vms", json=vm("no"))).status_code == 403
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        "vmsched-api: no project nope (an admin token creates it: POST /v1/projects)",
    )


async def test_the_served_app_has_no_asyncapi_try_and_its_pages_load_only_its_own_assets(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as anyone:
        assert (await anyone.post("/asyncapi/try", json={"channelName": "vm.create", "message": {}})).status_code == 404
        for page in ("/docs", "/asyncapi"):
            html = (await anyone.get(page)).text
            assets = [src for _, src in re.findall(r'(src|href)="([^"]+)"', html)]
            assert assets, page
            for asset in assets:
                assert asset.startswith("/static/"), (page, asset)  # nothing from another host
                assert (await anyone.get(asset)).status_code == 200, asset
        assert (await anyone.get("/v1/vms")).status_code == 401


async def test_fifty_concurrent_requests_on_two_replicas_against_room_for_ten_accept_exactly_ten(
    stack: Stack, replica: Stack, admin: httpx.AsyncClient
) -> None:
    project = await new_project(admin, instances=10, cpu=1000)
    token = (await new_token(admin, project, "vms:write"))["token"]
    # They wait for room (no host has their label), holding their share of the quota meanwhile.
    async with (
        api_client(stack.api_url, token, timeout=60) as on_a,
        api_client(replica.api_url, token, timeout=60) as on_b,
    ):
        answers = await asyncio.gather(
            *((on_a if i % 2 else on_b).post("/v1/vms", json=vm(f"race-{i}", wait_s=600)) for i in range(50))
        )
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [202] * 10 + [403] * 40, statuses
        refusal = next(answer.json() for answer in answers if answer.status_code == 403)
        assert refusal == {
            "reason": "quota_exceeded",
            "resource": "instances",
            "limit": 10,
            "used": 10,
            "requested": 1,
        }
        shown = (await on_a.get(f"/v1/projects/{project}")).json()["usage"]
        assert (shown["instances"], shown["cpu"]) == (10, 10)

        # A batch past the quota is refused whole; a VM that ends gives its share back.
        batch = await on_b.post("/v1/vms/batch", json={"vms": [vm("b1"), vm("b2")]})
        assert batch.status_code == 403
        assert batch.json()["requested"] == 2
        accepted = [answer.json()["id"] for answer in answers if answer.status_code == 202]
        assert (await on_a.delete(f"/v1/vms/{accepted[0]}")).status_code == 202
        assert (await on_b.post("/v1/vms", json=vm("after", wait_s=600))).status_code == 202
        for vm_id in accepted[1:]:
            await on_a.delete(f"/v1/vms/{vm_id}")


async def test_a_request_past_a_resource_limit_names_it(stack: Stack, admin: httpx.AsyncClient) -> None:
    project = await new_project(admin, cpu=3)
    token = (await new_token(admin, project, "vms:write"))["token"]
    async with api_client(stack.api_url, token, timeout=30) as api:
        first = await api.post("/v1/vms", json=vm("two", cpu=2, wait_s=600))
        assert first.status_code == 202
        refused = await api.post("/v1/vms", json=vm("two-more", cpu=2, wait_s=600))
        assert (refused.status_code, refused.json()) == (
            403,
            {"reason": "quota_exceeded", "resource": "cpu", "limit": 3, "used": 2, "requested": 2},
        )
        assert (await api.get("/v1/vms")).json()["items"][0]["id"] == first.json()["id"]  # nothing else
        await api.delete(f"/v1/vms/{first.json()['id']}")
