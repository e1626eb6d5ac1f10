"""The dashboard at /ui in a real browser (Debian's chromium, headless, driven by Playwright), on the
real stack: what a person sees follows the fleet. A VM created through the API shows among the
placements, a paused host changes colour, the why-pending panel gives the reasons, a host's page
shows its scheduling info and its VMs; a rebalance plan's progress shows in its panel, a drain's in
the maintenance panel and on its host's page. Each page's screenshot is kept in test-artifacts/ui/.

The page learns of changes by polling here (GET /v1/events, where served, only makes it quicker),
so every wait below is an ``expect`` with a deadline, never a sleep."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from devtools.stack import ROOT, Stack
from tests.fleets import enrolled_fleet
from tests.integration.moving import disagreements, host_shares, open_only, running_on, settled
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources, Taint, TaintEffect

CHROMIUM = Path(os.environ.get("VMSCHED_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = ROOT / "test-artifacts" / "ui"
HOST_CPU = 8
# The page polls every 2 s: a change shows within one or two polls; the deadline leaves room for a
# busy machine.
SEEN_WITHIN_MS = 20_000


@pytest.fixture
def chromium() -> Path:
    """Debian's chromium (Playwright's own browser download cannot work here)."""
    if not CHROMIUM.exists():
        missing = f"no browser at {CHROMIUM}: apt-get install chromium (or set VMSCHED_CHROMIUM)"
        pytest.fail(missing)  # never a skip: a green run must have looked at the dashboard
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return CHROMIUM


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


@pytest.fixture
async def fleet(stack: Stack, servers: Servers, api: httpx.AsyncClient) -> AsyncIterator[tuple[str, list[str]]]:
    """Four hosts of this test's own in two zones (its VMs ask for their suite label)."""
    suite = f"ui-{uuid.uuid4().hex[:6]}"
    hosts = [
        HostSpec(
            id=f"{suite}-{index}",
            capacity=Resources(cpu=HOST_CPU, memory_mb=16384, disk_gb=200),
            labels={"suite": suite, "zone": f"{suite}-z{index % 2 + 1}"},
        )
        for index in range(4)
    ]
    ids = [host.id for host in hosts]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0):
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: {h["id"] for h in r.json() if h["status"] == "online"} >= set(ids),
            timeout=60,
            what="the suite's hosts online",
        )
        yield suite, ids


async def create_vm(api: httpx.AsyncClient, suite: str, name: str, cpu: int, **extra: Any) -> dict[str, Any]:
    body = {"name": name, "cpu": cpu, "memory_mb": 1024, "disk_gb": 10, "labels": {"suite": suite}, **extra}
    created = await api.post("/v1/vms", json=body)
    assert created.status_code == 202, created.text
    vm: dict[str, Any] = created.json()
    return vm


async def open_dashboard(browser: Browser, stack: Stack) -> Page:
    """The dashboard as a person opens it: the page asks for the token, they paste it. It gets no
    event stream (as from an API without GET /v1/events): what it shows, it learns by polling."""
    page = await browser.new_page(viewport={"width": 1400, "height": 900})
    await page.route("**/v1/events", lambda route: route.fulfill(status=404))
    await page.goto(f"{stack.api_url}/ui")
    await expect(page.get_by_label("API token")).to_be_visible()
    await page.get_by_label("API token").fill(stack.token)
    await page.get_by_role("button", name="Open").click()
    await expect(page.locator("#fleet-page")).to_be_visible()
    await expect(page.locator("#feed")).to_have_text("polling every 2 s")
    return page


async def background(page: Page, selector: str) -> str:
    painted: str = await page.locator(selector).evaluate(
        "cell => { const style = getComputedStyle(cell); return style.backgroundColor + ' ' + style.backgroundImage; }"
    )
    return painted


def host_cell(host_id: str) -> str:
    return f'#zones a.host[data-host="{host_id}"]'


async def test_the_dashboard_shows_placements_paused_hosts_and_why_vms_wait(
    browser: Browser, stack: Stack, api: httpx.AsyncClient, fleet: tuple[str, list[str]]
) -> None:
    suite, hosts = fleet
    page = await open_dashboard(browser, stack)

    # The fleet as a heatmap, grouped by zone.
    for index, host_id in enumerate(hosts):
        zone = page.locator(".zone", has_text=f"zone {suite}-z{index % 2 + 1}")
        await expect(zone.locator(f'a.host[data-host="{host_id}"]')).to_be_visible(timeout=SEEN_WITHIN_MS)
    empty = await background(page, host_cell(hosts[1]))

    # A VM created through the API shows among the placements, on the host the scheduler chose.
    placed = await create_vm(api, suite, f"{suite}-web", cpu=HOST_CPU)
    scheduled = await eventually(
        lambda: api.get(f"/v1/vms/{placed['id']}"),
        lambda r: r.json()["hypervisor_id"] is not None,
        timeout=30,
        what="the VM placed",
    )
    placed_on = scheduled.json()["hypervisor_id"]
    row = page.locator(f'#placements li[data-vm="{placed["id"]}"]')
    await expect(row).to_contain_text(f"{suite}-web → {placed_on}", timeout=SEEN_WITHIN_MS)
    # Its host, now full, is drawn hotter than an empty one.
    await expect(page.locator(host_cell(placed_on))).to_have_attribute("title", re.compile(r"cpu 8/8"))
    assert await background(page, host_cell(placed_on)) != empty

    # A host paused by the operator changes colour, and is listed as taking no new VM.
    paused = next(host_id for host_id in hosts if host_id != placed_on)
    before = await background(page, host_cell(paused))
    patched = await api.patch(f"/v1/hosts/{paused}", json={"scheduling_paused": True})
    assert patched.status_code == 200, patched.text
    await expect(page.locator(host_cell(paused))).to_have_class(re.compile(r"\bpaused\b"), timeout=SEEN_WITHIN_MS)
    assert await background(page, host_cell(paused)) != before
    await expect(page.locator("#maintenance")).to_contain_text(paused)

    # VMs that fit no host: the why-pending panel says why, with the numbers.
    too_big = HOST_CPU * 4
    waiting = await create_vm(api, suite, f"{suite}-waits", cpu=too_big, wait_s=600)
    refused = await create_vm(api, suite, f"{suite}-never", cpu=too_big)
    waiting_row = page.locator(f'#pending li[data-vm="{waiting["id"]}"]')
    refused_row = page.locator(f'#pending li[data-vm="{refused["id"]}"]')
    await expect(waiting_row).to_contain_text("waiting", timeout=SEEN_WITHIN_MS)
    await expect(waiting_row.locator(".reason")).to_contain_text(re.compile(r"cpu: none of \d+"))
    await expect(refused_row).to_contain_text("unschedulable", timeout=SEEN_WITHIN_MS)
    await expect(refused_row.locator(".reason")).to_contain_text(re.compile(r"cpu: none of \d+"))
    # The decision record, opened by the person: the hosts each rule rejected.
    await refused_row.get_by_text("placement decision").click()
    await expect(refused_row.locator("details pre")).to_contain_text(re.compile(r"cpu: \d+ hosts? rejected"))
    await expect(refused_row.locator("details pre")).to_contain_text(f"needs {too_big}")
    await page.screenshot(path=SCREENSHOTS / "fleet.png", full_page=True)

    # A host's page, reached from its square: its scheduling info and its VMs.
    await page.locator(host_cell(placed_on)).click()
    await expect(page.locator("#host-page")).to_be_visible()
    await expect(page.locator("#host-id")).to_have_text(placed_on)
    await expect(page.locator("#scheduling-info")).to_contain_text(f"Agent: {placed_on}", timeout=SEEN_WITHIN_MS)
    await expect(page.locator("#scheduling-info")).to_contain_text(f"CPU: {HOST_CPU}/{HOST_CPU}")
    await expect(page.locator("#host-vms tbody")).to_contain_text(f"{suite}-web")
    await page.screenshot(path=SCREENSHOTS / "host.png", full_page=True)

    # The paused host's page says so.
    await page.goto(f"{stack.api_url}/ui#/hosts/{paused}")
    await expect(page.locator("#host-status")).to_have_text("online · paused", timeout=SEEN_WITHIN_MS)
    await expect(page.locator("#scheduling-info")).to_contain_text("Scheduling: paused")

    for vm in (waiting, placed):
        assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202
    await page.close()


@pytest.fixture
async def moving_fleet(
    stack: Stack, servers: Servers, api: httpx.AsyncClient
) -> AsyncIterator[tuple[str, list[str], dict[str, Any]]]:
    """Three hosts of this test's own (one a zone), tainted so that only its VMs land there (a plan
    and a drain move what is on them), every agent able to migrate; and the body of its VMs."""
    suite = f"uimv-{uuid.uuid4().hex[:6]}"
    taint = Taint(key="suite", value=suite, effect=TaintEffect.NO_SCHEDULE)
    hosts = [
        HostSpec(
            id=f"{suite}-{index}",
            capacity=Resources(cpu=HOST_CPU, memory_mb=16384, disk_gb=200),
            labels={"suite": suite, "zone": f"{suite}-z{index}"},
            taints=[taint],
        )
        for index in range(3)
    ]
    ids = [host.id for host in hosts]
    vm = {
        "cpu": 2,
        "memory_mb": 1024,
        "disk_gb": 10,
        "labels": {"suite": suite},
        "tolerations": [{"key": "suite", "value": suite, "effect": "NoSchedule"}],
    }
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0):
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: {h["id"] for h in r.json() if h["status"] == "online"} >= set(ids),
            timeout=60,
            what="the suite's hosts online",
        )
        yield suite, ids, vm
        for host_id in ids:
            await api.delete(f"/v1/hosts/{host_id}/drain")

        # Only its VMs tolerate its hosts' taint: every VM on them is the test's.
        async def left_on_its_hosts() -> list[str]:
            listed = [await api.get("/v1/vms", params={"hypervisor_id": host_id, "limit": 1000}) for host_id in ids]
            return [each["id"] for page in listed for each in page.json()["items"] if each["status"] != "deleted"]

        for vm_id in await left_on_its_hosts():
            await settled(api, vm_id)
            assert (await api.delete(f"/v1/vms/{vm_id}")).status_code == 202
        await eventually(left_on_its_hosts, lambda left: not left, timeout=30, what="the test's VMs deleted")


async def snapshot_agrees(servers: Servers, hosts: list[str]) -> None:
    """Redis agrees with PostgreSQL about the hosts (a plan is computed from the snapshot)."""
    await eventually(
        lambda: host_shares(servers, hosts), lambda shares: not disagreements(shares), timeout=30, what="snapshot"
    )


async def test_the_dashboard_shows_a_rebalance_plans_and_a_drains_progress(
    browser: Browser,
    stack: Stack,
    servers: Servers,
    api: httpx.AsyncClient,
    moving_fleet: tuple[str, list[str], dict[str, Any]],
) -> None:
    suite, hosts, vm = moving_fleet
    crowded = hosts[0]
    # Four VMs on the first host (the others paused meanwhile); one of them stopped: a drain moves
    # running VMs only, so it stays, listed as stuck with the reason.
    vms = await running_on(api, hosts, crowded, [{"name": f"{suite}-{n}", **vm} for n in range(4)])
    stopped = vms[-1]
    assert (await api.post(f"/v1/vms/{stopped['id']}/stop")).status_code == 202
    assert (await settled(api, stopped["id"]))["status"] == "stopped"
    await open_only(api, hosts, *hosts)
    await snapshot_agrees(servers, hosts)
    page = await open_dashboard(browser, stack)

    # A plan computed: its row says nothing is made yet.
    only_ours = [{"key": "suite", "operator": "In", "values": [suite]}]
    computed = await api.post(
        "/v1/rebalance/plans", json={"goal": "spread", "max_moves": 1, "host_selector": only_ours}
    )
    assert computed.status_code == 201, computed.text
    plan = computed.json()
    assert [move["from"] for move in plan["moves"]] == [crowded], plan
    row = page.locator(f'#rebalance li[data-plan="{plan["id"]}"]')
    await expect(row.locator(".badge")).to_have_text("planned", timeout=SEEN_WITHIN_MS)
    await expect(row).to_contain_text("0 of 1 move made · 0 skipped · 0 in flight · 1 queued")

    # Applied: the row follows it to the end.
    assert (await api.post(f"/v1/rebalance/plans/{plan['id']}/apply", json={"max_parallel": 1})).status_code == 202
    done = await eventually(
        lambda: api.get(f"/v1/rebalance/plans/{plan['id']}"),
        lambda r: r.json()["state"] == "done",
        timeout=60,
        what="the plan applied",
    )
    assert done.json()["progress"]["moved"] == 1, done.text
    await expect(row.locator(".badge")).to_have_text("done", timeout=SEEN_WITHIN_MS)
    await expect(row).to_contain_text("1 of 1 move made · 0 skipped · 0 in flight · 0 queued")
    await page.screenshot(path=SCREENSHOTS / "rebalance.png", full_page=True)

    # The crowded host drained: its two running VMs move away, the stopped one is stuck.
    await snapshot_agrees(servers, hosts)
    started = await api.post(f"/v1/hosts/{crowded}/drain", json={"max_parallel": 2, "deadline_s": 600})
    assert started.status_code == 202, started.text
    drain = await eventually(
        lambda: api.get(f"/v1/hosts/{crowded}/drain"),
        lambda r: len(r.json()["moved"]) == 2 and not r.json()["in_flight"] and not r.json()["queued"],
        timeout=60,
        what="the drain's two moves made",
    )
    (stuck,) = drain.json()["stuck"]
    assert stuck["vm_id"] == stopped["id"]
    maintenance = page.locator(f'#maintenance li[data-host="{crowded}"]')
    await expect(maintenance).to_contain_text(
        "2 of 3 VMs moved · 0 in flight · 0 queued · 1 stuck", timeout=SEEN_WITHIN_MS
    )
    await expect(maintenance.locator(".reason")).to_contain_text(f"stuck {stopped['id']}: stopped")
    await page.screenshot(path=SCREENSHOTS / "fleet-progress.png", full_page=True)

    # The host's page: the drain's state and progress, and each VM it moves, the stuck one by name.
    await maintenance.get_by_role("link", name=crowded).click()
    await expect(page.locator("#host-page")).to_be_visible()
    await expect(page.locator("#host-drain-panel")).to_be_visible(timeout=SEEN_WITHIN_MS)
    await expect(page.locator("#host-drain-state")).to_have_text("draining")
    await expect(page.locator("#host-drain-progress")).to_contain_text(
        "2 of 3 VMs moved · 0 in flight · 0 queued · 1 stuck"
    )
    stuck_row = page.locator(f'#host-drain-vms li[data-vm="{stopped["id"]}"]')
    await expect(stuck_row).to_contain_text(stopped["name"])
    await expect(stuck_row.locator(".badge")).to_have_text("stuck")
    await expect(stuck_row.locator(".reason")).to_have_text(stuck["reason"])
    names = {each["id"]: each["name"] for each in vms}
    for moved in drain.json()["moved"]:
        moved_row = page.locator(f'#host-drain-vms li[data-vm="{moved["vm_id"]}"]')
        await expect(moved_row).to_contain_text(names[moved["vm_id"]])
        await expect(moved_row.locator(".reason")).to_have_text(f"now on {moved['to']}")
    await page.screenshot(path=SCREENSHOTS / "drain.png", full_page=True)

    # A host without a drain shows no drain panel.
    await page.goto(f"{stack.api_url}/ui#/hosts/{hosts[1]}")
    await expect(page.locator("#host-id")).to_have_text(hosts[1])
    await expect(page.locator("#scheduling-info")).to_contain_text(f"Agent: {hosts[1]}", timeout=SEEN_WITHIN_MS)
    await expect(page.locator("#host-drain-panel")).to_be_hidden()
    await page.close()


async def test_the_dashboard_asks_again_for_a_token_the_api_refuses(browser: Browser, stack: Stack) -> None:
    page = await browser.new_page()
    await page.goto(f"{stack.api_url}/ui")
    await page.get_by_label("API token").fill("vmsched_not-a-token")
    await page.get_by_role("button", name="Open").click()
    await expect(page.locator("#login-error")).to_contain_text("refused the token", timeout=SEEN_WITHIN_MS)
    await expect(page.locator("#fleet-page")).to_be_hidden()
    assert await page.evaluate("sessionStorage.getItem('vmsched.token')") is None
    await page.screenshot(path=SCREENSHOTS / "login.png", full_page=True)
    await page.close()


async def test_the_page_reads_an_event_stream_and_takes_a_404_for_polling_alone(browser: Browser, stack: Stack) -> None:
    page = await browser.new_page()
    await page.goto(f"{stack.api_url}/ui")
    # Two events (the second with two data lines) around a keep-alive comment, then the end.
    stream = (
        'event: vm.assigned\ndata: {"vm_id": "a"}\n\n'
        ": keep-alive\n\n"
        'event: vm.status\ndata: {"vm_id": "b"}\ndata: more\n\n'
    )
    await page.route(
        "**/v1/events", lambda route: route.fulfill(status=200, content_type="text/event-stream", body=stream)
    )
    follow = """async () => {
        const { follow } = await import("/static/ui/sse.js");
        const events = [];
        let opened = false;
        const outcome = await follow("/v1/events", {}, {
            onOpen: () => { opened = true; },
            onEvent: (event) => events.push(event),
        });
        return { outcome, opened, events };
    }"""
    assert await page.evaluate(follow) == {
        "outcome": "ended",
        "opened": True,
        "events": [
            {"event": "vm.assigned", "data": '{"vm_id": "a"}'},
            {"event": "vm.status", "data": '{"vm_id": "b"}\nmore'},
        ],
    }
    await page.unroute("**/v1/events")
    await page.route("**/v1/events", lambda route: route.fulfill(status=404))
    assert await page.evaluate(follow) == {"outcome": "absent", "opened": False, "events": []}
    await page.close()


async def test_the_page_and_its_assets_come_from_the_api_alone(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as anyone:
        page = await anyone.get("/ui")
        assert page.status_code == 200
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assets = re.findall(r'(?:src|href)="(/[^"#][^"]*)"', page.text)
        assert {"/static/ui/dashboard.js", "/static/ui/dashboard.css"} <= set(assets)
        for asset in assets:
            assert (await anyone.get(asset)).status_code == 200, asset
        script = (await anyone.get("/static/ui/dashboard.js")).text
        imported = re.findall(r'from "\./([^"]+)"', script)
        assert imported, "the page's modules"
        for module in imported:
            assert (await anyone.get(f"/static/ui/{module}")).status_code == 200, module
        # The page holds no data: every figure it shows comes from a /v1 route, which wants a token.
        assert (await anyone.get("/v1/hosts")).status_code == 401
