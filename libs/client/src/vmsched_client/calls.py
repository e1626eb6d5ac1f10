"""Every API request the clients send, described once: its method, path, query, body, and how its
answer is read into a contract model. :mod:`vmsched_client.sync` and :mod:`vmsched_client.aio` only
send them, so the two clients cannot drift apart."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from uuid import UUID

import httpx
from pydantic import BaseModel, TypeAdapter

from vmsched_contract.api import (
    AuditPage,
    Drain,
    DrainRequest,
    Host,
    HostPatch,
    MigrateRequest,
    Placement,
    PlacementReplay,
    Project,
    ProjectRequest,
    Reservation,
    ReservationRequest,
    SchedulerSettings,
    SchedulerSettingsView,
    ServerGroup,
    ServerGroupRequest,
    Token,
    TokenCreated,
    TokenRequest,
    Vm,
    VmBatch,
    VmBatchRequest,
    VmPage,
    VmRequest,
)
from vmsched_contract.messages import HostSelectorTerm
from vmsched_contract.rebalance import (
    PLANS_PER_PAGE,
    ApplyRequest,
    Goal,
    PlanRequest,
    RebalancePlan,
    RebalancePlanPage,
)
from vmsched_contract.status import VmStatus
from vmsched_contract.storage import SharedPoolBody, SharedPoolView
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import Capacity, Simulation, SimulationRequest

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Query = Mapping[str, str | int | list[str]]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, and how to read its (successful) answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: Query = field(default_factory=dict)
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate_json(response.content)


def _list_of(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]
    return lambda response: adapter.validate_json(response.content)


def _nothing(_: httpx.Response) -> None:
    return None


def _json(response: httpx.Response) -> dict[str, Any]:
    answer: dict[str, Any] = response.json()
    return answer


def _dump(body: BaseModel) -> Any:
    # Fields left unset are left out: the API's defaults apply to them (cpu and memory_mb, wait_s).
    return body.model_dump(mode="json", exclude_unset=True)


def _query(**values: Any) -> dict[str, str | int | list[str]]:
    return {name: value for name, value in values.items() if value is not None}


# VMs


def create_vm(request: VmRequest, idempotency_key: str | None = None) -> Call[Vm]:
    """``POST /v1/vms``. Always with an ``Idempotency-Key`` (a fresh one unless given), so a retry
    after a 503 never makes a second VM."""
    key = idempotency_key or str(uuid.uuid4())
    return Call("POST", "/v1/vms", _model(Vm), body=_dump(request), headers={"Idempotency-Key": key})


def create_vms(request: VmBatchRequest) -> Call[VmBatch]:
    return Call("POST", "/v1/vms/batch", _model(VmBatch), body=_dump(request))


def get_vm(vm_id: UUID | str) -> Call[Vm]:
    return Call("GET", f"/v1/vms/{vm_id}", _model(Vm))


def vm_page(
    *,
    status: VmStatus | None = None,
    hypervisor_id: str | None = None,
    project: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> Call[VmPage]:
    query = _query(status=status, hypervisor_id=hypervisor_id, project=project, limit=limit, cursor=cursor)
    return Call("GET", "/v1/vms", _model(VmPage), params=query)


def get_placement(vm_id: UUID | str) -> Call[Placement]:
    return Call("GET", f"/v1/vms/{vm_id}/placement", _model(Placement))


def replay_placement(vm_id: UUID | str, strategy: Strategy | None = None) -> Call[PlacementReplay]:
    """The VM's last decision made again on its journaled inputs (``strategy``: with another one)."""
    query = _query(strategy=None if strategy is None else strategy.value)
    return Call("GET", f"/v1/vms/{vm_id}/placement/replay", _model(PlacementReplay), params=query)


def delete_vm(vm_id: UUID | str) -> Call[Vm]:
    return Call("DELETE", f"/v1/vms/{vm_id}", _model(Vm))


def migrate_vm(vm_id: UUID | str, target_host: str | None = None) -> Call[Vm]:
    return Call("POST", f"/v1/vms/{vm_id}/migrate", _model(Vm), body=_dump(MigrateRequest(target_host=target_host)))


def stop_vm(vm_id: UUID | str) -> Call[Vm]:
    return Call("POST", f"/v1/vms/{vm_id}/stop", _model(Vm))


def start_vm(vm_id: UUID | str) -> Call[Vm]:
    return Call("POST", f"/v1/vms/{vm_id}/start", _model(Vm))


# Hosts


def list_hosts() -> Call[list[Host]]:
    return Call("GET", "/v1/hosts", _list_of(Host))


def get_host(host_id: str) -> Call[Host]:
    return Call("GET", f"/v1/hosts/{host_id}", _model(Host))


def update_host(host_id: str, patch: HostPatch) -> Call[Host]:
    return Call("PATCH", f"/v1/hosts/{host_id}", _model(Host), body=_dump(patch))


def delete_host(host_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/hosts/{host_id}", _nothing)


def list_storage_pools() -> Call[list[SharedPoolView]]:
    return Call("GET", "/v1/storage-pools", _list_of(SharedPoolView))


def get_storage_pool(name: str) -> Call[SharedPoolView]:
    return Call("GET", f"/v1/storage-pools/{name}", _model(SharedPoolView))


def set_storage_pool(name: str, body: SharedPoolBody) -> Call[SharedPoolView]:
    return Call("PUT", f"/v1/storage-pools/{name}", _model(SharedPoolView), body=_dump(body))


def delete_storage_pool(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/storage-pools/{name}", _nothing)


def drain_host(host_id: str, request: DrainRequest | None = None) -> Call[Drain]:
    return Call("POST", f"/v1/hosts/{host_id}/drain", _model(Drain), body=_dump(request or DrainRequest()))


def get_drain(host_id: str) -> Call[Drain]:
    return Call("GET", f"/v1/hosts/{host_id}/drain", _model(Drain))


def end_drain(host_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/hosts/{host_id}/drain", _nothing)


def fence_host(host_id: str) -> Call[Host]:
    return Call("POST", f"/v1/hosts/{host_id}/fence", _model(Host))


def unfence_host(host_id: str) -> Call[Host]:
    return Call("DELETE", f"/v1/hosts/{host_id}/fence", _model(Host))


def scheduling_info(host_id: str) -> Call[str]:
    """The host's scheduling info as a person reads it (text)."""
    return Call("GET", f"/v1/hosts/{host_id}/scheduling-info", lambda r: r.text, headers={"Accept": "text/plain"})


# Rebalance (hosts:admin)


def create_rebalance_plan(
    goal: Goal, max_moves: int = 50, host_selector: list[HostSelectorTerm] | None = None
) -> Call[RebalancePlan]:
    body = _dump(PlanRequest(goal=goal, max_moves=max_moves, host_selector=host_selector or []))
    return Call("POST", "/v1/rebalance/plans", _model(RebalancePlan), body=body)


def get_rebalance_plan(plan_id: UUID | str) -> Call[RebalancePlan]:
    return Call("GET", f"/v1/rebalance/plans/{plan_id}", _model(RebalancePlan))


def rebalance_plan_page(*, limit: int = PLANS_PER_PAGE, cursor: str | None = None) -> Call[RebalancePlanPage]:
    """A page of the plans, newest first."""
    return Call("GET", "/v1/rebalance/plans", _model(RebalancePlanPage), params=_query(limit=limit, cursor=cursor))


def apply_rebalance_plan(plan_id: UUID | str, max_parallel: int = 4) -> Call[RebalancePlan]:
    body = _dump(ApplyRequest(max_parallel=max_parallel))
    return Call("POST", f"/v1/rebalance/plans/{plan_id}/apply", _model(RebalancePlan), body=body)


# Server groups


def create_server_group(request: ServerGroupRequest) -> Call[ServerGroup]:
    return Call("POST", "/v1/server-groups", _model(ServerGroup), body=_dump(request))


def list_server_groups() -> Call[list[ServerGroup]]:
    return Call("GET", "/v1/server-groups", _list_of(ServerGroup))


def get_server_group(group_id: UUID | str) -> Call[ServerGroup]:
    return Call("GET", f"/v1/server-groups/{group_id}", _model(ServerGroup))


def delete_server_group(group_id: UUID | str) -> Call[None]:
    return Call("DELETE", f"/v1/server-groups/{group_id}", _nothing)


# Reservations (an admin makes and ends them; a project's tokens see its own)


def create_reservation(request: ReservationRequest) -> Call[Reservation]:
    return Call("POST", "/v1/reservations", _model(Reservation), body=_dump(request))


def list_reservations(project: str | None = None, limit: int = 100) -> Call[list[Reservation]]:
    return Call("GET", "/v1/reservations", _list_of(Reservation), params=_query(project=project, limit=limit))


def get_reservation(reservation_id: UUID | str) -> Call[Reservation]:
    return Call("GET", f"/v1/reservations/{reservation_id}", _model(Reservation))


def delete_reservation(reservation_id: UUID | str) -> Call[Reservation]:
    """``DELETE``: the reservation ends (``released``); its answer is the ended reservation."""
    return Call("DELETE", f"/v1/reservations/{reservation_id}", _model(Reservation))


# Projects and tokens (admin)


def create_project(request: ProjectRequest) -> Call[Project]:
    return Call("POST", "/v1/projects", _model(Project), body=_dump(request))


def list_projects() -> Call[list[Project]]:
    return Call("GET", "/v1/projects", _list_of(Project))


def get_project(name: str) -> Call[Project]:
    return Call("GET", f"/v1/projects/{name}", _model(Project))


def create_token(request: TokenRequest) -> Call[TokenCreated]:
    return Call("POST", "/v1/tokens", _model(TokenCreated), body=_dump(request))


def list_tokens(project: str | None = None) -> Call[list[Token]]:
    return Call("GET", "/v1/tokens", _list_of(Token), params=_query(project=project))


def get_token(token_id: UUID | str) -> Call[Token]:
    return Call("GET", f"/v1/tokens/{token_id}", _model(Token))


def revoke_token(token_id: UUID | str) -> Call[None]:
    return Call("DELETE", f"/v1/tokens/{token_id}", _nothing)


def audit_page(
    *, project: str | None = None, token_id: str | None = None, limit: int = 100, cursor: str | None = None
) -> Call[AuditPage]:
    query = _query(project=project, token_id=token_id, limit=limit, cursor=cursor)
    return Call("GET", "/v1/audit", _model(AuditPage), params=query)


# Settings and probes


def get_scheduler_settings() -> Call[SchedulerSettingsView]:
    return Call("GET", "/v1/settings/scheduler", _model(SchedulerSettingsView))


def set_default_strategy(strategy: Strategy) -> Call[SchedulerSettingsView]:
    body = _dump(SchedulerSettings(default_strategy=strategy))
    return Call("PUT", "/v1/settings/scheduler", _model(SchedulerSettingsView), body=body)


# What-if


def simulate(request: SimulationRequest) -> Call[Simulation]:
    return Call("POST", "/v1/placement/simulate", _model(Simulation), body=_dump(request))


def capacity(
    *,
    cpu: int | None = None,
    memory_mb: int | None = None,
    disk_gb: int = 0,
    gpu: int = 0,
    networks: list[str] | None = None,
) -> Call[Capacity]:
    query = _query(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb or None, gpu=gpu or None, network=networks or None)
    return Call("GET", "/v1/capacity", _model(Capacity), params=query)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", _json)


def events(
    *, types: list[str] | None = None, project: str | None = None, last_event_id: str | None = None
) -> Call[None]:
    """``GET /v1/events``, the live stream (read by the clients' ``watch``, not by ``read``)."""
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    query = _query(type=list(types) if types else None, project=project)
    return Call("GET", "/v1/events", _nothing, params=query, headers=headers)
