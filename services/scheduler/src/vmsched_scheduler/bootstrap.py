"""The scheduler's composition root: every part built and wired here, once.

The pure engine and the round know nothing of servers; this module gives the round its Redis
snapshot, its PostgreSQL ledger and its publisher, and puts a FastStream consumer in front.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial

from faststream import FastStream
from faststream.middlewares import AckPolicy
from faststream.rabbit import RabbitBroker

from vmsched_amqp import topology
from vmsched_amqp.broker import make_broker
from vmsched_amqp.consumer_app import BackgroundTasks, consumer_app
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import VmCreate, VmMigrate
from vmsched_pg import journal
from vmsched_pg.engine import create_engine, database_check
from vmsched_pg.outbox import publish_rows
from vmsched_placement import Weights
from vmsched_redis.connections import connect_redis, redis_check
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_runtime.metrics_server import SCHEDULER_METRICS_PORT
from vmsched_runtime.settings import Settings
from vmsched_scheduler.evictions import PostgresEvictions
from vmsched_scheduler.fleet_cache import FleetCache
from vmsched_scheduler.groups import ServerGroups
from vmsched_scheduler.intake import MigrationIntake, PlacementIntake
from vmsched_scheduler.journal import DecisionJournal
from vmsched_scheduler.journal_pruning import prune_forever
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.lost_slots import LostSlots
from vmsched_scheduler.reconcile import reconcile, reconcile_forever
from vmsched_scheduler.reservations import ReservationSweeper, sweep_forever
from vmsched_scheduler.reserve import PostgresReserve
from vmsched_scheduler.round import SchedulingRound
from vmsched_scheduler.round_items import RoundSettings
from vmsched_scheduler.waiting.waker import Waker

log = get_logger("vmsched_scheduler")

# VMs one round decides, claims and commits together at most.
ROUND_SIZE = 500


@dataclass
class SchedulerApp:
    app: FastStream
    broker: RabbitBroker


def subscribe(broker: RabbitBroker, intake: PlacementIntake, migrations: MigrationIntake) -> None:
    """The scheduler's consumers: ``vm.create`` into the placement intake, ``vm.migrate`` into the
    migration intake; a message is acked once every VM it carries is settled and announced."""

    @broker.subscriber(
        topology.SCHEDULER_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="scheduler.vm-create",
        description="Place VMs: claim capacity, commit hypervisor_id, emit vm.assigned (and vm.unschedulable); "
        "acked once every VM of the message is settled.",
    )
    async def on_vm_create(message: VmCreate) -> None:
        await intake.place(message)

    @broker.subscriber(
        topology.SCHEDULER_MIGRATE_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="scheduler.vm-migrate",
        description="Choose a migration's target by every rule of the VM (its source excluded), claim it, commit "
        "it, emit vm.migrating (or vm.migration_failed when no host takes it).",
    )
    async def on_vm_migrate(message: VmMigrate) -> None:
        await migrations.migrate(message)


def build_app(settings: Settings) -> SchedulerApp:
    broker = make_broker(settings, prefetch=settings.scheduler_prefetch)
    engine = create_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size or 8)
    redis = connect_redis(settings)
    snapshot = Snapshot(redis, settings.redis_key_prefix)
    fleet = FleetCache(snapshot, min_refresh_interval=0.02, usage_refresh_interval=settings.usage_refresh_interval)
    weights = Weights(cpu=settings.weight_cpu, memory=settings.weight_memory, disk=settings.weight_disk)
    groups = ServerGroups(engine, snapshot)  # rules kept once read: shared by the rounds and the waker
    publisher = Publisher(broker)
    scheduling_round = SchedulingRound(
        fleet,
        snapshot,
        PostgresLedger(
            engine, default_strategy=settings.scheduling_strategy, ha_reserve_hosts=settings.ha_reserve_hosts
        ),
        RoundSettings(
            weights=weights,
            offline_timeout=settings.agent_offline_timeout,
            preemption=settings.preemption,
            exclude_cluster_after=settings.exclude_cluster_after,
        ),
        rng=random.Random(),
        groups=groups,
        reserve=PostgresReserve(engine, settings.ha_reserve_hosts),
        evictions=PostgresEvictions(engine, publisher),
        journal=DecisionJournal(
            partial(journal.append, engine),
            weights,
            settings.agent_offline_timeout,
            retention=settings.journal_retention,
        ),
    )
    intake = PlacementIntake(
        scheduling_round,
        publisher,
        max_vms=ROUND_SIZE,
        send_deletes=lambda records: publish_rows(publisher, engine, records),
    )
    migrations = MigrationIntake(scheduling_round, publisher, max_moves=ROUND_SIZE)
    subscribe(broker, intake, migrations)
    waker = Waker(
        engine,
        snapshot,
        publisher,
        offline_timeout=settings.agent_offline_timeout,
        weights=weights,
        groups=groups,
        reserve=PostgresReserve(engine, settings.ha_reserve_hosts),
    )

    async def on_ready(background: BackgroundTasks) -> None:
        # Restore claims and allocations from PostgreSQL before the first decision.
        report = await reconcile(engine, snapshot)
        # The fleet read whole before the first message, not by it: a replica restarted under load
        # would hold the VMs the broker hands it behind a full read of every host.
        await fleet.refresh(force_full=True)
        log.info("scheduler ready", hosts=report.hosts, restored_claims=report.restored_claims)
        background.start(reconcile_forever(engine, snapshot, settings.reconcile_interval))
        background.start(fleet.reload_forever(settings.snapshot_full_refresh))
        background.start(waker.run_forever())
        lost = LostSlots(
            engine,
            snapshot,
            scheduling_round,
            lost_after=settings.agent_lost_timeout,
            heard_within=settings.agent_offline_timeout,
        )
        sweeper = ReservationSweeper(engine, snapshot, scheduling_round, lost)
        background.start(sweep_forever(sweeper, snapshot, settings.reservation_interval))
        background.start(prune_forever(engine, snapshot, settings.journal_retention, settings.journal_prune_interval))

    app = consumer_app(
        broker,
        on_ready=on_ready,
        closers=[intake.drain, migrations.drain, redis.aclose, engine.dispose],
        logger=log,
        settings=settings,
        metrics_port=SCHEDULER_METRICS_PORT,
        checks={"database": database_check(engine), "redis": redis_check(redis)},
    )
    return SchedulerApp(app=app, broker=broker)
