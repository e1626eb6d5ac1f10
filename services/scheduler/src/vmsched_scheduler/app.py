"""The scheduler process: a FastStream consumer of ``scheduler.vm-create`` around :class:`Scheduler`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from faststream import FastStream
from faststream.middlewares import AckPolicy
from faststream.rabbit import RabbitBroker

from vmsched_common import events, topology
from vmsched_common.amqp import make_broker
from vmsched_common.background import BackgroundTasks, consumer_app
from vmsched_common.connections import connect_redis
from vmsched_common.db.engine import create_engine
from vmsched_common.logs import get_logger
from vmsched_common.messages import VmAssigned, VmCreate, VmUnschedulable, assigned_message_id
from vmsched_common.settings import Settings
from vmsched_common.snapshot import Snapshot
from vmsched_scheduler.batch import BatchPlacer
from vmsched_scheduler.fleet_cache import FleetCache
from vmsched_scheduler.reconcile import reconcile, reconcile_forever
from vmsched_scheduler.service import Scheduler
from vmsched_scheduler.store import SchedulerStore

log = get_logger(__name__)


@dataclass
class SchedulerApp:
    app: FastStream
    broker: RabbitBroker


def build_app(settings: Settings) -> SchedulerApp:
    broker = make_broker(settings, prefetch=settings.scheduler_prefetch)
    engine = create_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size or 8, pre_ping=False)
    redis = connect_redis(settings)
    snapshot = Snapshot(redis, settings.redis_key_prefix)
    fleet = FleetCache(snapshot, full_refresh_every=settings.snapshot_full_refresh, min_refresh_interval=0.02)

    assigned = events.vm_assigned(broker)
    unschedulable = events.vm_unschedulable(broker)

    async def publish_assigned(event: VmAssigned) -> None:
        await assigned.publish(event, message_id=assigned_message_id(event.vm_id, event.attempt))

    async def publish_unschedulable(event: VmUnschedulable) -> None:
        await unschedulable.publish(event, message_id=f"{event.vm_id}:unschedulable")

    scheduler = Scheduler(
        settings=settings,
        snapshot=snapshot,
        fleet=fleet,
        store=SchedulerStore(engine, default_strategy=settings.scheduling_strategy),
        publish_assigned=publish_assigned,
        publish_unschedulable=publish_unschedulable,
        rng=random.Random(),
    )

    # The messages a replica holds are placed together (batch.py); anything unusual goes one by one.
    placer = BatchPlacer(scheduler, max_batch=settings.scheduler_prefetch)

    @broker.subscriber(
        topology.SCHEDULER_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="scheduler.vm-create",
        description="Place a VM: claim capacity, commit hypervisor_id, emit vm.assigned; ack after all three.",
    )
    async def on_vm_create(message: VmCreate) -> None:
        await placer.place(message)

    async def on_ready(background: BackgroundTasks) -> None:
        # Restore claims and allocations from PostgreSQL before the first decision.
        report = await reconcile(engine, snapshot)
        log.info("scheduler ready", hosts=report.hosts, restored_claims=report.restored_claims)
        background.start(reconcile_forever(engine, snapshot, settings.reconcile_interval))

    app = consumer_app(
        broker, on_ready=on_ready, closers=[placer.drain, redis.aclose, engine.dispose], logger=log, settings=settings
    )
    return SchedulerApp(app=app, broker=broker)
