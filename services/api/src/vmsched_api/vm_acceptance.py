"""Accepting requests for VMs in PostgreSQL: a group of requests, one transaction.

The API's requests for VMs (a single ``POST /v1/vms`` or a batch) that arrive together are accepted
together (:mod:`vmsched_api.vm_intake` forms the groups): their VM rows go in one INSERT, their audit
rows in another, and one COMMIT makes them all durable. Each request keeps its own answer: a
request refused (quota, an Idempotency-Key reused with another body, an unknown server group or
reservation) is refused alone and changes nothing, and its refusal is on the audit trail beside the
others' acceptances.

Two ways through, with the same outcome as taking the requests one at a time in the group's order:

- together (the common case): each request's checks, then every accepted row in one statement,
  then the quota of each limited project over all its rows at once;
- one by one, each request behind a savepoint of its own: when a limited project's quota does not
  hold for all its requests at once (then which of them fit depends on their order), or when two
  requests of the group carry the same Idempotency-Key (the second answers from the first).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_api import quota
from vmsched_api.group_store import UnknownServerGroup, check_groups_exist
from vmsched_api.identity.audit import AuditStub, write_audit
from vmsched_api.request_phases import Phase, timed
from vmsched_api.reservation_store import UnknownReservation, check_reservations_fit
from vmsched_contract.api import VmDefaults, VmRequest
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.models import VmRow
from vmsched_pg.rows import VM_COLUMNS, VM_FIELDS, vm_from_row


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request body."""

    def __init__(self, key: str) -> None:
        super().__init__(f"Idempotency-Key {key} was already used with a different request body")
        self.key = key


# What refuses one request alone, and the HTTP status it is answered (and audited) with.
Refusal = quota.QuotaExceeded | IdempotencyConflict | UnknownServerGroup | UnknownReservation
REFUSAL_STATUS: dict[type[Exception], int] = {
    quota.QuotaExceeded: 403,
    IdempotencyConflict: 409,
    UnknownServerGroup: 422,
    UnknownReservation: 422,
}


@dataclass(frozen=True, slots=True)
class CreateRequest:
    """One request's VMs, as the API read them, and who asked (for the audit trail)."""

    bodies: Sequence[VmRequest]
    project: str
    defaults: VmDefaults
    idempotency_key: str | None = None
    all_or_nothing: bool = False
    audit: AuditStub | None = None
    single: bool = True  # POST /v1/vms: audited with its VM's Location as the target


@dataclass(frozen=True, slots=True)
class Accepted:
    vms: list[VmRecord]
    replayed: bool = False  # an earlier request's VM, returned again for its Idempotency-Key


Outcome = Accepted | Refusal


def request_hash(body: VmRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def _wait_s(body: VmRequest, defaults: VmDefaults) -> int:
    """How long the VM may wait for room; a VM naming a reservation waits for none (its room is a
    slot, there or not)."""
    return 0 if body.reservation is not None else body.waits(defaults)


def _rows(request: CreateRequest, accepted: datetime) -> list[dict[str, Any]]:
    """The VM rows a request asks for, with the defaults for the amounts a body leaves out (the row
    holds what the VM got); an all-or-nothing batch as one gang, which never waits."""
    gang = uuid.uuid4() if request.all_or_nothing else None
    defaults = replace(request.defaults, wait_s=0) if request.all_or_nothing else request.defaults
    rows = []
    for body in request.bodies:
        resources = body.resources(defaults)
        wait_s = _wait_s(body, defaults)
        rows.append(
            {
                "id": uuid.uuid4(),
                "name": body.name,
                "status": VmStatus.PENDING.value,
                "cpu": resources.cpu,
                "memory_mb": resources.memory_mb,
                "disk_gb": body.disk_gb,
                "gpu": body.gpu,
                "extra": body.extra,
                "volumes": [volume.model_dump(mode="json") for volume in body.volumes],
                "labels": body.labels,
                "host_selector": [term.model_dump(mode="json") for term in body.host_selector],
                "tolerations": [toleration.model_dump(mode="json") for toleration in body.tolerations],
                "networks": list(body.networks),
                "dedicated": body.dedicated,
                "planner": (body.planner or defaults.planner).value,
                "strategy": body.strategy.value if body.strategy else None,
                "restart_policy": body.restart_policy.value,
                "idempotency_key": request.idempotency_key,
                "request_hash": request_hash(body) if request.idempotency_key else None,
                "server_group": body.server_group,
                "wait_s": wait_s,
                "wait_until": accepted + timedelta(seconds=wait_s) if wait_s else None,
                "gang_id": gang,
                "priority": body.priority,
                "project": request.project,
                "reservation": body.reservation,
            }
        )
    return rows


# executemany form: one compiled (and cached) statement sent as multi-row VALUES pages. A
# .values([...]) statement is compiled anew for every size, which cost a fifth of the API's CPU.
# Rows whose (project, Idempotency-Key) is taken are not inserted (and not returned).
_INSERT = (
    insert(VmRow)
    .on_conflict_do_nothing(index_elements=["project", "idempotency_key"])
    .returning(*(VmRow.__table__.c[name] for name in VM_FIELDS), quota.LIMITED)
)
_BY_KEY = text(
    f"""
    SELECT {VM_COLUMNS}, idempotency_key, request_hash FROM vms
     WHERE (project, idempotency_key) IN (SELECT * FROM unnest(CAST(:projects AS text[]), CAST(:keys AS text[])))
    """
)


class _OneByOne(Exception):
    """The group must be accepted one request at a time (see the module's docstring)."""


class VmAcceptance:
    """Accepts a group of requests in one transaction; a dead pooled connection is retried once."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def accept(self, requests: Sequence[CreateRequest]) -> list[Outcome]:
        """Each request's outcome, in order: its VMs (pending, or an earlier request's for a reused
        Idempotency-Key), or what refused it."""
        accepted = datetime.now(UTC)
        rows = [_rows(request, accepted) for request in requests]
        keys = [(r.project, r.idempotency_key) for r in requests if r.idempotency_key is not None]
        if len(keys) == len(set(keys)):
            try:
                async with self.engine.begin() as connection:
                    return await self._together(connection, requests, rows)
            except _OneByOne:
                pass  # rolled back: nothing of the first try stays
        async with self.engine.begin() as connection:
            return await self._one_by_one(connection, requests, rows)

    async def _together(
        self, connection: AsyncConnection, requests: Sequence[CreateRequest], rows: list[list[dict[str, Any]]]
    ) -> list[Outcome]:
        outcomes: list[Outcome | None] = [await _checks(connection, request) for request in requests]
        live = [n for n, outcome in enumerate(outcomes) if outcome is None]
        inserted = await _insert(connection, [row for n in live for row in rows[n]])
        limited: dict[str, list[Any]] = {}
        for n in live:
            mine = [inserted[row["id"]] for row in rows[n] if row["id"] in inserted]
            if any(row.limited for row in mine):
                limited.setdefault(requests[n].project, []).extend(mine)
        with timed(Phase.CHECKS):
            for project in sorted(limited):  # every writer locks projects in name order
                try:
                    await quota.enforce(connection, project, limited[project])
                except quota.QuotaExceeded:
                    raise _OneByOne from None
        missing = [n for n in live if not all(row["id"] in inserted for row in rows[n])]
        existing = await _existing(connection, [requests[n] for n in missing])
        for n in live:
            if n in missing:
                outcomes[n] = _replay(requests[n], existing)
            else:
                outcomes[n] = Accepted([vm_from_row(inserted[row["id"]]) for row in rows[n]])
        done = [outcome for outcome in outcomes if outcome is not None]
        await _audit(connection, requests, done)
        return done

    async def _one_by_one(
        self, connection: AsyncConnection, requests: Sequence[CreateRequest], rows: list[list[dict[str, Any]]]
    ) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for request, mine in zip(requests, rows, strict=True):
            refusal = await _checks(connection, request)
            if refusal is not None:
                outcomes.append(refusal)
                continue
            savepoint = await connection.begin_nested()
            inserted = await _insert(connection, mine)
            try:
                with timed(Phase.CHECKS):
                    await quota.enforce(connection, request.project, list(inserted.values()))
            except quota.QuotaExceeded as exceeded:
                await savepoint.rollback()
                outcomes.append(exceeded)
                continue
            await savepoint.commit()
            if len(inserted) == len(mine):
                outcomes.append(Accepted([vm_from_row(inserted[row["id"]]) for row in mine]))
            else:
                outcomes.append(_replay(request, await _existing(connection, [request])))
        await _audit(connection, requests, outcomes)
        return outcomes


async def _checks(connection: AsyncConnection, request: CreateRequest) -> Refusal | None:
    """What refuses the request before anything is inserted: a server group or reservation that is
    not the project's (to use). Read-only; a request naming neither costs no round trip."""
    with timed(Phase.CHECKS):
        try:
            await check_groups_exist(connection, [body.server_group for body in request.bodies], request.project)
            await check_reservations_fit(connection, request.bodies, request.defaults, request.project)
        except (UnknownServerGroup, UnknownReservation) as refusal:
            return refusal
    return None


async def _insert(connection: AsyncConnection, rows: list[dict[str, Any]]) -> dict[uuid.UUID, Any]:
    """Insert ``rows``; those inserted, by id (a row whose Idempotency-Key is taken is not)."""
    if not rows:
        return {}
    return {row.id: row for row in (await connection.execute(_INSERT, rows)).all()}


async def _existing(connection: AsyncConnection, requests: Sequence[CreateRequest]) -> dict[tuple[str, str], Any]:
    """The rows holding these requests' Idempotency-Keys, by (project, key)."""
    keyed = [request for request in requests if request.idempotency_key is not None]
    if not keyed:
        return {}
    params = {"projects": [r.project for r in keyed], "keys": [r.idempotency_key for r in keyed]}
    return {(row.project, row.idempotency_key): row for row in await connection.execute(_BY_KEY, params)}


def _replay(request: CreateRequest, existing: dict[tuple[str, str], Any]) -> Outcome:
    """The answer to a request whose Idempotency-Key an earlier request took: that request's VM if
    the bodies match, else a conflict."""
    assert request.idempotency_key is not None  # only a keyed row can fail to insert
    row = existing[(request.project, request.idempotency_key)]
    if row.request_hash != request_hash(request.bodies[0]):
        return IdempotencyConflict(request.idempotency_key)
    return Accepted([vm_from_row(row)], replayed=True)


async def _audit(connection: AsyncConnection, requests: Sequence[CreateRequest], outcomes: Sequence[Outcome]) -> None:
    """The group's audit rows, in its transaction: each request with how it ended."""
    entries = []
    for request, outcome in zip(requests, outcomes, strict=True):
        if request.audit is None:
            continue
        if isinstance(outcome, Accepted):
            target = f"/v1/vms/{outcome.vms[0].id}" if request.single else request.audit.path
            entries.append(request.audit.entry(202, target))
        else:
            entries.append(request.audit.entry(REFUSAL_STATUS[type(outcome)], request.audit.path))
    await write_audit(connection, entries)
