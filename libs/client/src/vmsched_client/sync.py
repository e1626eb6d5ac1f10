"""The blocking client: ``with Client() as vmsched: vmsched.create_vm(...)``.

Written from :mod:`vmsched_client.aio` by ``make sync-client`` (devtools/sync_client.py): change
that file and run it, never this one; a test fails while the two differ."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar
from uuid import UUID

import httpx

from vmsched_client import calls
from vmsched_client._http import (
    WaitTimeout,
    decided,
    http_options,
    read_answer,
    reconnect_delay,
    refusal,
    request_options,
    stream_timeout,
)
from vmsched_client.calls import Call
from vmsched_client.config import ClientConfig
from vmsched_client.retry import RetryPolicy
from vmsched_client.sse import Event, SseParser
from vmsched_contract.api import (
    AuditRecord,
    Drain,
    DrainRequest,
    Host,
    HostPatch,
    Placement,
    PlacementReplay,
    Project,
    ProjectRequest,
    Reservation,
    ReservationRequest,
    SchedulerSettingsView,
    ServerGroup,
    ServerGroupRequest,
    Token,
    TokenCreated,
    TokenRequest,
    Vm,
    VmBatchRequest,
    VmRequest,
)
from vmsched_contract.messages import HostSelectorTerm
from vmsched_contract.rebalance import PLANS_PER_PAGE, Goal, RebalancePlan
from vmsched_contract.status import VmStatus
from vmsched_contract.storage import SharedPoolBody, SharedPoolView
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import Capacity, Simulation, SimulationRequest

T = TypeVar("T")


class Client:
    """vmsched's HTTP API, typed with the models it serves (:mod:`vmsched_contract.api`).

    The URL and the token come from the arguments, else ``VMSCHED_URL`` / ``VMSCHED_TOKEN``, else
    ``~/.config/vmsched/config.toml``. A 429 or 503 is sent again (``retry``), after the server's
    ``Retry-After``. A refusal raises the :class:`~vmsched_client.errors.ApiError` of its status."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        config: ClientConfig | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config or ClientConfig.load(url, token)
        self.retry = retry or RetryPolicy()
        self._timeout = timeout
        self._sleep = sleep
        self._http = httpx.Client(transport=transport, **http_options(self.config, timeout))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send ``call``, again after a 429 or 503 while the retry policy allows; its answer read."""
        attempt = 1
        while True:
            response = self._http.request(call.method, call.path, **request_options(call))
            delay = self.retry.delay(attempt, response.status_code, response.headers.get("Retry-After"))
            if delay is None:
                return read_answer(call, response)
            self._sleep(delay)
            attempt += 1

    # VMs

    def create_vm(self, request: VmRequest, *, idempotency_key: str | None = None) -> Vm:
        return self.send(calls.create_vm(request, idempotency_key))

    def create_vms(self, request: VmBatchRequest) -> list[Vm]:
        batch = self.send(calls.create_vms(request))
        return batch.items

    def get_vm(self, vm_id: UUID | str) -> Vm:
        return self.send(calls.get_vm(vm_id))

    def list_vms(
        self,
        *,
        status: VmStatus | None = None,
        hypervisor_id: str | None = None,
        project: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Vm]:
        """Every VM that matches, a page (``page_size``) fetched at a time as the iteration goes."""
        cursor: str | None = None
        while True:
            page = self.send(
                calls.vm_page(
                    status=status, hypervisor_id=hypervisor_id, project=project, limit=page_size, cursor=cursor
                )
            )
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_placement(self, vm_id: UUID | str) -> Placement:
        return self.send(calls.get_placement(vm_id))

    def replay_placement(self, vm_id: UUID | str, *, strategy: Strategy | None = None) -> PlacementReplay:
        """The VM's last decision made again on the exact inputs it saw; ``strategy``: the host that
        strategy would have chosen. 409 (:class:`~vmsched_client.errors.Conflict`) when not journaled, 410
        (:class:`~vmsched_client.errors.Gone`) when its journal entry was pruned."""
        return self.send(calls.replay_placement(vm_id, strategy))

    def delete_vm(self, vm_id: UUID | str) -> Vm:
        return self.send(calls.delete_vm(vm_id))

    def migrate_vm(self, vm_id: UUID | str, target_host: str | None = None) -> Vm:
        """Move a running VM to another host, live; ``target_host`` None: the scheduler chooses."""
        return self.send(calls.migrate_vm(vm_id, target_host))

    def stop_vm(self, vm_id: UUID | str) -> Vm:
        """Power the VM off; it keeps its room on its host."""
        return self.send(calls.stop_vm(vm_id))

    def start_vm(self, vm_id: UUID | str) -> Vm:
        return self.send(calls.start_vm(vm_id))

    def wait_for_vm(
        self,
        vm_id: UUID | str,
        *,
        until: Callable[[Vm], bool] = decided,
        timeout: float = 60.0,
        interval: float = 0.5,
        on_poll: Callable[[Vm], None] | None = None,
    ) -> Vm:
        """Poll the VM until ``until`` holds (default: a scheduler is done with it); raise
        :class:`WaitTimeout` at ``timeout``. ``on_poll`` sees every state read (a progress bar)."""
        deadline = time.monotonic() + timeout
        while True:
            vm = self.get_vm(vm_id)
            if on_poll is not None:
                on_poll(vm)
            if until(vm):
                return vm
            if time.monotonic() >= deadline:
                raise WaitTimeout(vm, timeout)
            self._sleep(interval)

    # Hosts

    def list_hosts(self) -> list[Host]:
        return self.send(calls.list_hosts())

    def get_host(self, host_id: str) -> Host:
        return self.send(calls.get_host(host_id))

    def update_host(self, host_id: str, patch: HostPatch) -> Host:
        return self.send(calls.update_host(host_id, patch))

    def pause_host(self, host_id: str) -> Host:
        """Cordon: no new VM goes to the host; its VMs stay."""
        return self.update_host(host_id, HostPatch(scheduling_paused=True))

    def resume_host(self, host_id: str) -> Host:
        """Uncordon: the host takes new VMs again."""
        return self.update_host(host_id, HostPatch(scheduling_paused=False))

    def dedicate_host(self, host_id: str, project: str | None) -> Host:
        """Give the host to ``project``: it takes only that project's VMs (None: any project's again)."""
        return self.update_host(host_id, HostPatch(dedicated_to=project))

    def delete_host(self, host_id: str) -> None:
        self.send(calls.delete_host(host_id))

    # Shared storage pools

    def list_storage_pools(self) -> list[SharedPoolView]:
        return self.send(calls.list_storage_pools())

    def get_storage_pool(self, name: str) -> SharedPoolView:
        return self.send(calls.get_storage_pool(name))

    def set_storage_pool(self, name: str, body: SharedPoolBody) -> SharedPoolView:
        """Create a shared pool or set its capacity and tags."""
        return self.send(calls.set_storage_pool(name, body))

    def delete_storage_pool(self, name: str) -> None:
        """Forget a shared pool no VM's volumes are on (409 otherwise)."""
        self.send(calls.delete_storage_pool(name))

    def drain_host(self, host_id: str, request: DrainRequest | None = None) -> Drain:
        """Empty the host: paused, and (``evacuate``) every VM migrated away; GET it with get_drain."""
        return self.send(calls.drain_host(host_id, request))

    def get_drain(self, host_id: str) -> Drain:
        return self.send(calls.get_drain(host_id))

    def end_drain(self, host_id: str) -> None:
        """End the host's drain: it takes new VMs again."""
        self.send(calls.end_drain(host_id))

    def fence_host(self, host_id: str) -> Host:
        """Declare the host down now: its VMs fail (their restart policy applies); it takes no VM
        until unfenced."""
        return self.send(calls.fence_host(host_id))

    def unfence_host(self, host_id: str) -> Host:
        """Put a fenced host back in service."""
        return self.send(calls.unfence_host(host_id))

    def scheduling_info(self, host_id: str) -> str:
        return self.send(calls.scheduling_info(host_id))

    # Rebalance (hosts:admin)

    def create_rebalance_plan(
        self, goal: Goal, *, max_moves: int = 50, host_selector: list[HostSelectorTerm] | None = None
    ) -> RebalancePlan:
        """Compute moves of running VMs that even the fleet out (spread) or empty hosts (pack);
        nothing moves until the plan is applied."""
        return self.send(calls.create_rebalance_plan(goal, max_moves, host_selector))

    def get_rebalance_plan(self, plan_id: UUID | str) -> RebalancePlan:
        """The plan, and where its application stands (each move's state)."""
        return self.send(calls.get_rebalance_plan(plan_id))

    def list_rebalance_plans(self, *, page_size: int = PLANS_PER_PAGE) -> Iterator[RebalancePlan]:
        """Every plan, newest first, each with where its application stands; a page
        (``page_size``, at most ``MAX_PLANS_PER_PAGE``) fetched at a time as the iteration goes."""
        cursor: str | None = None
        while True:
            page = self.send(calls.rebalance_plan_page(limit=page_size, cursor=cursor))
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def apply_rebalance_plan(self, plan_id: UUID | str, *, max_parallel: int = 4) -> RebalancePlan:
        """Carry the plan out by live migrations, ``max_parallel`` at most at once; poll it with
        get_rebalance_plan until its state is done. 409 when applied already."""
        return self.send(calls.apply_rebalance_plan(plan_id, max_parallel))

    # Server groups

    def create_server_group(self, request: ServerGroupRequest) -> ServerGroup:
        return self.send(calls.create_server_group(request))

    def list_server_groups(self) -> list[ServerGroup]:
        return self.send(calls.list_server_groups())

    def get_server_group(self, group_id: UUID | str) -> ServerGroup:
        return self.send(calls.get_server_group(group_id))

    def delete_server_group(self, group_id: UUID | str) -> None:
        self.send(calls.delete_server_group(group_id))

    # Reservations

    def create_reservation(self, request: ReservationRequest) -> Reservation:
        """Hold room for a project (admin); ``pending`` until a scheduler places it."""
        return self.send(calls.create_reservation(request))

    def list_reservations(self, *, project: str | None = None, limit: int = 100) -> list[Reservation]:
        """Newest first: the token's project's (an admin's: every project's, or ``project``'s)."""
        return self.send(calls.list_reservations(project, limit))

    def get_reservation(self, reservation_id: UUID | str) -> Reservation:
        return self.send(calls.get_reservation(reservation_id))

    def delete_reservation(self, reservation_id: UUID | str) -> Reservation:
        """End it (admin): the room still held goes back to the hosts; VMs on its slots stay."""
        return self.send(calls.delete_reservation(reservation_id))

    # Projects, tokens, audit (admin)

    def create_project(self, request: ProjectRequest) -> Project:
        return self.send(calls.create_project(request))

    def list_projects(self) -> list[Project]:
        return self.send(calls.list_projects())

    def get_project(self, name: str) -> Project:
        return self.send(calls.get_project(name))

    def create_token(self, request: TokenRequest) -> TokenCreated:
        return self.send(calls.create_token(request))

    def list_tokens(self, *, project: str | None = None) -> list[Token]:
        return self.send(calls.list_tokens(project))

    def get_token(self, token_id: UUID | str) -> Token:
        return self.send(calls.get_token(token_id))

    def revoke_token(self, token_id: UUID | str) -> None:
        self.send(calls.revoke_token(token_id))

    def list_audit(
        self, *, project: str | None = None, token_id: str | None = None, page_size: int = 100
    ) -> Iterator[AuditRecord]:
        """The audit trail, newest first, a page at a time as the iteration goes."""
        cursor: str | None = None
        while True:
            page = self.send(calls.audit_page(project=project, token_id=token_id, limit=page_size, cursor=cursor))
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # Settings, probes, events

    def get_scheduler_settings(self) -> SchedulerSettingsView:
        return self.send(calls.get_scheduler_settings())

    def set_default_strategy(self, strategy: Strategy) -> SchedulerSettingsView:
        return self.send(calls.set_default_strategy(strategy))

    def simulate(self, request: SimulationRequest) -> Simulation:
        """Where these VMs would land on the fleet as it is now, and why not; nothing changes."""
        return self.send(calls.simulate(request))

    def capacity(
        self,
        *,
        cpu: int | None = None,
        memory_mb: int | None = None,
        disk_gb: int = 0,
        gpu: int = 0,
        networks: list[str] | None = None,
    ) -> Capacity:
        """How many more VMs of this shape (needing ``networks``) the fleet takes now: in total, per
        zone, per host."""
        return self.send(calls.capacity(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu, networks=networks))

    def health(self) -> dict[str, Any]:
        return self.send(calls.health())

    def watch(
        self,
        *,
        types: list[str] | None = None,
        project: str | None = None,
        last_event_id: str | None = None,
        reconnect: bool = True,
        on_connect: Callable[[], object] | None = None,
    ) -> Generator[Event, None, None]:
        """The live events (``GET /v1/events``, server-sent events), as they happen. When the stream
        breaks it connects again with ``Last-Event-ID`` (the last event seen), so none is missed or
        seen twice (as far as the server keeps them); ``reconnect=False`` ends with the stream.
        ``on_connect`` is called at each connection once the server follows the stream (its first line
        came): what happens from then on is seen, so a program can act only then."""
        parser = SseParser(last_event_id=last_event_id)
        attempt = failures = 0
        while True:
            call = calls.events(types=types, project=project, last_event_id=parser.last_event_id)
            failures += 1  # until an event comes: a server that keeps failing or ending empty is backed off
            try:
                with self._http.stream(
                    call.method,
                    call.path,
                    params=call.params,
                    headers=call.headers,
                    timeout=stream_timeout(self._timeout),
                ) as response:
                    if not response.is_success:
                        response.read()
                        attempt += 1
                        delay = self.retry.delay(attempt, response.status_code, response.headers.get("Retry-After"))
                        if delay is None:
                            raise refusal(response)
                        self._sleep(delay)
                        continue
                    attempt = 0
                    connected = False
                    for line in response.iter_lines():
                        if not connected and on_connect is not None:
                            on_connect()
                        connected = True
                        event = parser.feed(line)
                        if event is not None:
                            failures = 0
                            yield event
            except httpx.TransportError:
                if not reconnect:
                    raise
            if not reconnect:
                return
            # An event cut off by the break is dropped (the spec's rule): it comes again after the last id.
            parser = SseParser(last_event_id=parser.last_event_id, retry_ms=parser.retry_ms)
            self._sleep(reconnect_delay(parser.retry_ms, failures, self.retry.cap))
