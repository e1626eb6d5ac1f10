"""/v1/vms: ask for VMs, watch them, move them, stop and start them, delete them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Header, HTTPException, Query, Request, Response, status
from pydantic import ValidationError

from vmsched_amqp import events
from vmsched_api.broker_flow import BROKER_REFUSAL, refuse_while_broker_blocks
from vmsched_api.deps import Services, ServicesDep
from vmsched_api.group_store import UnknownServerGroup
from vmsched_api.identity.audit import AuditStub, mark_audited
from vmsched_api.identity.auth import VmsReader, VmsWriter
from vmsched_api.preemption_fates import fates
from vmsched_api.quota import QuotaExceeded
from vmsched_api.refusals import QUOTA_REFUSAL, refusals
from vmsched_api.repository import to_vm
from vmsched_api.reservation_store import UnknownReservation
from vmsched_api.vm_acceptance import Accepted, CreateRequest, IdempotencyConflict
from vmsched_contract.api import (
    MigrateRequest,
    Placement,
    PlacementReplay,
    PreemptionReplay,
    Vm,
    VmBatch,
    VmBatchRequest,
    VmDefaults,
    VmPage,
    VmRequest,
)
from vmsched_contract.decision import Candidate, JournalRef, PlacementRecord, PreemptionMove
from vmsched_contract.messages import PreemptionOutcome, ProjectName, VmDeleted
from vmsched_contract.scopes import Scope
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain import live_migration
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import power_command
from vmsched_pg.journal import IncompleteChain, PrunedEntry, chain
from vmsched_pg.outbox import publish_rows
from vmsched_pg.vm_actions import BadTarget, PowerAction, Refused
from vmsched_placement import decide
from vmsched_placement.journal import Inputs, rebuild, replay_preemption
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/vms", tags=["vms"])
log = get_logger("vmsched_api")

# Seconds a request waits for the broker's confirm of what it publishes after its commit: past that
# it answers anyway (the change stands; the outbox sweeper or a resend sweep publishes it again), so
# a broker that stops answering mid-request (an alarm raised, a link gone silent) cannot hold it.
PUBLISH_WAIT = 5.0

IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", max_length=255, description="the same key returns the same VM"),
]


async def _publish(services: ServicesDep, rows: list[VmRecord]) -> None:
    """Publish after the commit. If the broker is unreachable the change still stands: the sweeper
    publishes it once the broker is back (rows stay marked unpublished until then)."""
    try:
        async with asyncio.timeout(PUBLISH_WAIT):
            await publish_rows(services.publisher, services.engine, rows, marks=services.published)
    except Exception as error:
        log.warning("publish after commit failed; the sweeper will retry", error=repr(error), count=len(rows))


async def _accept(request: Request, services: ServicesDep, asked: CreateRequest) -> Accepted:
    """Hand the request to the intake (which writes its audit row with its outcome); a refusal of
    this request alone becomes its HTTP answer."""
    try:
        accepted = await services.intake.create(asked)
    except (QuotaExceeded, IdempotencyConflict, UnknownServerGroup, UnknownReservation):
        mark_audited(request.scope)
        raise
    mark_audited(request.scope)
    return accepted


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Vm,
    responses={**refusals(409), **QUOTA_REFUSAL, **BROKER_REFUSAL},
)
async def create_vm(
    body: VmRequest,
    request: Request,
    services: ServicesDep,
    response: Response,
    principal: VmsWriter,
    idempotency_key: IdempotencyKey = None,
) -> Vm:
    """Ask for a VM, in the token's project (403 ``quota_exceeded`` past its quota; 503 while the
    broker blocks publishers)."""
    await refuse_while_broker_blocks(services.publisher)
    asked = CreateRequest(
        bodies=[body],
        project=principal.project,
        defaults=VmDefaults.of(services.settings),
        idempotency_key=idempotency_key,
        audit=AuditStub.of(request.scope),
    )
    try:
        accepted = await _accept(request, services, asked)
    except IdempotencyConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except UnknownServerGroup as error:
        raise _unknown_group(error, ["body", "server_group"]) from None
    except UnknownReservation as error:
        raise _unusable_reservation(error, ["body", "reservation"]) from None
    response.headers["Location"] = f"/v1/vms/{accepted.vms[0].id}"
    if accepted.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return to_vm(accepted.vms[0])


@router.post(
    "/batch",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=VmBatch,
    responses={**QUOTA_REFUSAL, **BROKER_REFUSAL},
)
async def create_vms(body: VmBatchRequest, request: Request, services: ServicesDep, principal: VmsWriter) -> VmBatch:
    """Ask for up to 1,000 VMs at once, in the token's project: all of them within its quota, or none."""
    await refuse_while_broker_blocks(services.publisher)
    asked = CreateRequest(
        bodies=body.vms,
        project=principal.project,
        defaults=VmDefaults.of(services.settings),
        all_or_nothing=body.all_or_nothing,
        audit=AuditStub.of(request.scope),
        single=False,
    )
    try:
        accepted = await _accept(request, services, asked)
    except UnknownServerGroup as error:
        first = next(i for i, vm in enumerate(body.vms) if vm.server_group == error.group_id)
        raise _unknown_group(error, ["body", "vms", first, "server_group"]) from None
    except UnknownReservation as error:
        first = next(i for i, vm in enumerate(body.vms) if vm.reservation == error.reservation_id)
        raise _unusable_reservation(error, ["body", "vms", first, "reservation"]) from None
    return VmBatch(items=[to_vm(vm) for vm in accepted.vms])


def _unknown_group(error: UnknownServerGroup, loc: list[str | int]) -> HTTPException:
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT, [{"loc": loc, "msg": str(error), "type": "unknown_server_group"}]
    )


def _unusable_reservation(error: UnknownReservation, loc: list[str | int]) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [{"loc": loc, "msg": str(error), "type": error.type}])


@router.get("", response_model=VmPage)
async def list_vms(
    services: ServicesDep,
    principal: VmsReader,
    status_filter: Annotated[VmStatus | None, Query(alias="status")] = None,
    hypervisor_id: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    project: Annotated[
        ProjectName | None, Query(description="admin tokens: only this project's VMs (others see only their own)")
    ] = None,
) -> VmPage:
    """The token's project's VMs (an admin's: every project's, or ``project``'s), oldest first."""
    if not principal.sees(project or principal.project):
        return VmPage(items=[], next_cursor=None)
    try:
        items, next_cursor = await services.repository.list_vms(
            status=status_filter,
            hypervisor_id=hypervisor_id,
            limit=limit,
            cursor=cursor,
            project=principal.project_filter(project),
        )
    except ValueError as error:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["query", "cursor"], "msg": str(error), "type": "value_error"}],
        ) from None
    return VmPage(items=items, next_cursor=next_cursor)


@router.get("/{vm_id}", response_model=Vm, responses=refusals(404))
async def get_vm(vm_id: UUID, services: ServicesDep, principal: VmsReader) -> Vm:
    vm = await services.repository.get_vm(vm_id, principal.project_filter(None))
    if vm is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no VM {vm_id}")
    return to_vm(vm)


@router.get("/{vm_id}/placement", response_model=Placement, responses=refusals(404))
async def get_placement(vm_id: UUID, services: ServicesDep, principal: VmsReader) -> Placement:
    """The decision record of the VM's last placement: the chosen host and the runners-up, hosts
    rejected by rule, and for an unschedulable VM a few rejected hosts per rule with the numbers."""
    vm = await services.repository.get_vm(vm_id, principal.project_filter(None))
    if vm is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no VM {vm_id}")
    decision = None
    if vm.placement is not None:
        try:
            decision = PlacementRecord.model_validate(vm.placement)
        except ValidationError:  # written by a version before the typed record: nothing to show
            log.warning("placement record in an older shape", vm_id=str(vm_id))
    moved = None if vm.preemption is None else PreemptionMove.model_validate(vm.preemption)
    return Placement(vm_id=vm_id, status=vm.status, decision=decision, preemption=moved)


@router.get("/{vm_id}/placement/replay", response_model=PlacementReplay, responses=refusals(404, 409, 410))
async def replay_placement(
    vm_id: UUID,
    services: ServicesDep,
    principal: VmsReader,
    strategy: Annotated[
        Strategy | None, Query(description="decide with this strategy instead of the recorded one")
    ] = None,
) -> PlacementReplay:
    """The VM's last decision made again on the exact inputs it saw (the hosts' state, the request,
    the strategy, the round-robin cursor, the seed), from the decision journal: the same host, or,
    with ``?strategy=``, the host another strategy would have chosen. A preemption is chosen again
    with its victims (the strategy plays no part in it); a VM that took a reservation's slot replays
    the decision that placed the slot. A VM placed once the victims of a preemption by move had left
    its host replays that preemption too (``preemption``), naming each victim and where it went.
    ``usage: approximate`` when ``?strategy=`` ranks by measured
    usage the decision did not read (the journal keeps usage only for decisions that read it). 409
    when the decision was not journaled (a record older than the journal) or its journal is
    incomplete; 410 when its entry was pruned (older than
    ``VMSCHED_JOURNAL_RETENTION``)."""
    vm = await services.repository.get_vm(vm_id, principal.project_filter(None))
    if vm is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no VM {vm_id}")
    try:
        record = PlacementRecord.model_validate(vm.placement) if vm.placement is not None else None
    except ValidationError:
        record = None
    if record is None or record.journal is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"VM {vm_id} has no journaled decision to replay")
    inputs = await _inputs(services, vm, record.journal, record.decided_at)
    visible = principal.project_filter(None)
    moved = None if vm.preemption is None else PreemptionMove.model_validate(vm.preemption)
    if inputs.preemption is not None:
        replayed = await _replay_preemption(services, vm_id, record, inputs, visible)
    else:
        replayed = _replay_placement(vm_id, record, inputs, strategy)
    if moved is not None and moved.journal is not None:
        deleted = frozenset(replayed.victims or ()) if inputs.preemption is not None else frozenset()
        replayed.preemption = await _replay_move(services, vm, moved, moved.journal, visible, deleted)
    return replayed


async def _inputs(services: Services, vm: VmRecord, journal: JournalRef, decided_at: datetime) -> Inputs:
    """The inputs of ``vm``'s decision ``journal``, rebuilt: 410 when pruned, 409 when its chain has
    a hole."""
    try:
        async with services.engine.connect() as connection:
            bodies = await chain(connection, journal.replica, journal.seq)
    except PrunedEntry as error:
        retention = services.settings.journal_retention
        raise HTTPException(
            status.HTTP_410_GONE,
            f"{error}: decisions are kept {retention:g} s (VMSCHED_JOURNAL_RETENTION); "
            f"this one was made at {decided_at.isoformat()}",
        ) from None
    except IncompleteChain as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    return rebuild(bodies, str(vm.id), vm.name)


def _replay_placement(
    vm_id: UUID, record: PlacementRecord, inputs: Inputs, strategy: Strategy | None
) -> PlacementReplay:
    request = inputs.request if strategy is None else replace(inputs.request, strategy=strategy)
    decision = decide(inputs.fleet, request, inputs.context)
    decided = record.candidates[0] if record.candidates else None
    scores = decision.scores
    candidates = [
        Candidate(host=host, score=None if scores is None else scores[position])
        for position, host in enumerate(decision.ranked)
    ]
    assert record.journal is not None
    return PlacementReplay(
        vm_id=vm_id,
        journal=record.journal,
        recorded_strategy=record.strategy,
        decided_host=None if decided is None else decided.host,
        decided_score=None if decided is None else decided.score,
        strategy=request.strategy,
        host=decision.host_id,
        score=decision.score,
        candidates=candidates,
        same=((None, None) if decided is None else (decided.host, decided.score)) == (decision.host_id, decision.score),
        hosts=len(inputs.fleet),
        usage="exact" if inputs.usage_exact_for(request.strategy) else "approximate",
    )


async def _replay_preemption(
    services: Services, vm_id: UUID, record: PlacementRecord, inputs: Inputs, visible: str | None
) -> PlacementReplay:
    """A preemption chosen again: the hosts it could free, the residents it read, its seed's draw;
    with what became of the victims it deleted."""
    assert record.journal is not None
    victims = replay_preemption(inputs)
    host = None if victims is None else victims.host_id
    ids = [] if victims is None else [UUID(v.vm_id) for v in victims.vms]
    now = await services.repository.get_vms(ids, visible)
    return PlacementReplay(
        vm_id=vm_id,
        journal=record.journal,
        recorded_strategy=record.strategy,
        decided_host=record.host,
        decided_score=None,
        strategy=inputs.request.strategy,
        host=host,
        score=None,
        candidates=[] if host is None else [Candidate(host=host, score=None)],
        same=host == record.host,
        hosts=len(inputs.fleet),
        victims=None if victims is None else ids,
        fates=None if host is None else fates(ids, host, PreemptionOutcome.DELETED, now),
    )


async def _replay_move(
    services: Services,
    vm: VmRecord,
    moved: PreemptionMove,
    journal: JournalRef,
    visible: str | None,
    deleted: frozenset[UUID],
) -> PreemptionReplay:
    """The preemption that moved VMs off a host for ``vm``, chosen again, with where its victims
    went (``deleted``: those the preemptor deleted after their move rolled back). Its victims are
    told even when its journal entry is gone (pruned): the replay's host and ``same`` are then null."""
    recorded = [UUID(v) for v in moved.victims]
    now = await services.repository.get_vms(recorded, visible)
    told = fates(recorded, moved.host, PreemptionOutcome.MOVED, now, deleted)
    try:
        victims = replay_preemption(await _inputs(services, vm, journal, moved.decided_at))
    except HTTPException:
        return PreemptionReplay(journal=journal, decided_host=moved.host, host=None, same=None, victims=told)
    host = None if victims is None else victims.host_id
    again = set() if victims is None else {UUID(v.vm_id) for v in victims.vms}
    return PreemptionReplay(
        journal=journal,
        decided_host=moved.host,
        host=host,
        same=host == moved.host and again == set(recorded),
        victims=told,
    )


@router.delete(
    "/{vm_id}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Vm,
    responses={**refusals(404, 409), **BROKER_REFUSAL},
)
async def delete_vm(vm_id: UUID, services: ServicesDep, principal: VmsWriter) -> Vm:
    await refuse_while_broker_blocks(services.publisher)
    asked = await services.deletes.request(vm_id, principal.project_filter(None))
    if asked is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no VM {vm_id}")
    vm, change = asked.vm, asked.change
    if change is None and vm.status is VmStatus.MIGRATING:
        raise HTTPException(status.HTTP_409_CONFLICT, f"VM {vm_id} is migrating; delete it once the migration ends")
    if change is not None and vm.status is VmStatus.DELETING:
        await _publish(services, [vm])
    elif change is not None and vm.status is VmStatus.DELETED:
        try:
            async with asyncio.timeout(PUBLISH_WAIT):
                await services.publisher.publish(
                    events.VM_DELETED, VmDeleted(vm_id=vm.id, hypervisor_id=None, project=vm.project)
                )
        except Exception as error:  # the VM is deleted; only subscribers miss the event
            log.warning("vm.deleted not published", error=repr(error))
    return to_vm(vm)


@router.post(
    "/{vm_id}/migrate",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Vm,
    responses={**refusals(404, 409), **BROKER_REFUSAL},
)
async def migrate_vm(
    vm_id: UUID, services: ServicesDep, principal: VmsWriter, body: Annotated[MigrateRequest | None, Body()] = None
) -> Vm:
    """Move a running VM to another host, live (Nova's live migration): a scheduler chooses the
    target by every rule of the VM, its host excluded (or checks them on ``target_host``), claims it,
    and the target prepares, the source hands over, the target takes it. The VM is ``migrating``
    meanwhile, holding capacity on both hosts; it ends ``running`` on the target (``vm.migrated``) or,
    when no host takes it or a step fails, ``running`` on its source with the reason in
    ``status_reason`` (``vm.migration_failed``). 409: not running, something else in flight, or a
    host whose agent cannot migrate. 403: ``target_host`` named by a token without ``hosts:admin``
    (which hosts exist is the operators' to know). 422: ``target_host`` unknown or the VM's own."""
    target = None if body is None else body.target_host
    if target is not None and not principal.may(Scope.HOSTS_ADMIN):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "naming target_host needs the scope hosts:admin")
    await refuse_while_broker_blocks(services.publisher)
    try:
        vm = await services.repository.request_migration(vm_id, target, principal.project_filter(None))
    except Refused as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except BadTarget as error:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", "target_host"], "msg": str(error), "type": "value_error"}],
        ) from None
    if vm is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no VM {vm_id}")
    try:
        async with asyncio.timeout(PUBLISH_WAIT):
            await services.publisher.publish(events.VM_MIGRATE, live_migration.request_of(vm, time.time()))
    except Exception as error:  # the gateway asks again once VMSCHED_RESEND_STALE_AFTER has passed
        log.warning("vm.migrate not published; it will be sent again", error=repr(error))
    return to_vm(vm)


@router.post(
    "/{vm_id}/stop",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Vm,
    responses={**refusals(404, 409), **BROKER_REFUSAL},
)
async def stop_vm(vm_id: UUID, services: ServicesDep, principal: VmsWriter) -> Vm:
    """Power a running VM off (``stopped`` at once, task ``stopping`` until its agent confirms). Its
    host keeps its room, as Nova does: ``POST .../start`` brings it back on the same host. 409: not
    running, or a host whose agent cannot stop VMs."""
    return await _power(vm_id, PowerAction.STOP, services, principal.project_filter(None))


@router.post(
    "/{vm_id}/start",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Vm,
    responses={**refusals(404, 409), **BROKER_REFUSAL},
)
async def start_vm(vm_id: UUID, services: ServicesDep, principal: VmsWriter) -> Vm:
    """Power a stopped VM on again on its host (``running`` at once, task ``starting`` until its agent
    confirms). 409: not stopped, or a host whose agent cannot start VMs."""
    return await _power(vm_id, PowerAction.START, services, principal.project_filter(None))


async def _power(vm_id: UUID, action: PowerAction, services: ServicesDep, project: str | None) -> Vm:
    await refuse_while_broker_blocks(services.publisher)
    try:
        vm = await services.repository.request_power(vm_id, action, project)
    except Refused as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    if vm is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no VM {vm_id}")
    try:
        command = power_command(vm)
        if command is not None and vm.hypervisor_id is not None:
            async with asyncio.timeout(PUBLISH_WAIT):
                await services.publisher.command(vm.hypervisor_id, vm.command(command))
    except Exception as error:  # the gateway sends it again once VMSCHED_RESEND_STALE_AFTER has passed
        log.warning(f"{action.value} command not published; it will be sent again", error=repr(error))
    return to_vm(vm)
