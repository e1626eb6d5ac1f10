"""FastAPI dependencies, defined once as Annotated aliases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from faststream.rabbit import RabbitBroker
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_amqp.publishing import Publisher
from vmsched_api.identity.audit import AuditLog
from vmsched_api.identity.authenticator import Authenticator
from vmsched_api.identity.rate_limit import RateLimiter
from vmsched_api.identity.store import TokenStore
from vmsched_api.project_store import ProjectStore
from vmsched_api.repository import Repository
from vmsched_api.vm_deletes import VmDeletes
from vmsched_api.vm_intake import VmIntake
from vmsched_pg.outbox import PublishedMarks
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.readiness import Readiness
from vmsched_runtime.settings import Settings


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    repository: Repository
    snapshot: Snapshot
    broker: RabbitBroker
    publisher: Publisher
    published: PublishedMarks
    intake: VmIntake
    deletes: VmDeletes
    authenticator: Authenticator
    rate_limiter: RateLimiter
    audit: AuditLog
    tokens: TokenStore
    projects: ProjectStore
    readiness: Readiness


async def _services(request: Request) -> Services:
    # async: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(_services)]
