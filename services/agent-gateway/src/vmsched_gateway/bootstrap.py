"""The gateway's composition root: every part built and wired here, once."""

from __future__ import annotations

import time

from faststream import FastStream
from faststream.middlewares import AckPolicy

from vmsched_amqp import topology
from vmsched_amqp.agent_identity import vhost_of
from vmsched_amqp.broker import make_broker
from vmsched_amqp.consumer_app import BackgroundTasks, consumer_app
from vmsched_amqp.lean_consumer import LeanConsumer
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import AgentHeartbeat, VmAssigned, VmMigrating, VmStatusReport
from vmsched_domain.fencing import FencePolicy
from vmsched_gateway.agent_queues import AgentQueues
from vmsched_gateway.command_ratios import CommandRatios
from vmsched_gateway.fencing import FenceCommand, LostHosts
from vmsched_gateway.health import FailureGrace, HealthCheck
from vmsched_gateway.hearing import BrokerHearing
from vmsched_gateway.heartbeats import HeartbeatFold
from vmsched_gateway.host_store import HostStore
from vmsched_gateway.identity import MessageKind, Speakers
from vmsched_gateway.migration_sweeps import MigrationSweep
from vmsched_gateway.orphans import Orphans
from vmsched_gateway.preemptors import Preemptors
from vmsched_gateway.relay import AssignmentRelay
from vmsched_gateway.report_store import ReportStore
from vmsched_gateway.reports import StatusReports
from vmsched_gateway.self_probe import SelfProbe
from vmsched_gateway.sweep_store import SweepStore
from vmsched_gateway.task_store import TaskStore
from vmsched_gateway.tasks import Tasks
from vmsched_pg.drains import DrainStore
from vmsched_pg.engine import create_engine, database_check
from vmsched_pg.fences import FenceStore
from vmsched_pg.rebalance_plans import RebalanceStore
from vmsched_redis.connections import connect_redis, redis_check
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_runtime.metrics_server import GATEWAY_METRICS_PORT
from vmsched_runtime.settings import AgentAuth, Settings

log = get_logger(__name__)

# Heartbeats are not acked, so this only bounds the memory a batch being written holds.
HEARTBEAT_PREFETCH = 2000
# Reports in flight: they are written in batches of up to 256, so a few batches' worth.
STATUS_PREFETCH = 512


def build_app(settings: Settings) -> FastStream:
    broker = make_broker(settings, prefetch=256)
    engine = create_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size or 6)
    redis = connect_redis(settings)
    snapshot = Snapshot(redis, settings.redis_key_prefix)
    publisher = Publisher(broker)
    queues = AgentQueues(broker)
    hosts = HostStore(engine)
    orphans = Orphans(publisher, settings.orphan_vms)
    preemptors = Preemptors(engine)
    fold = HeartbeatFold(hosts, snapshot, queues, orphans, publisher, settings.agent_offline_timeout)
    tasks = Tasks(TaskStore(engine), snapshot, publisher, queues)
    drains = MigrationSweep("drain", DrainStore(engine), publisher)
    rebalances = MigrationSweep("rebalance", RebalanceStore(engine), publisher)
    reports = StatusReports(
        ReportStore(engine, max_attempts=settings.max_attempts, exclude_for=settings.exclude_for),
        snapshot,
        publisher,
        orphans,
        tasks,
        preemptors,
    )
    relay = AssignmentRelay(publisher, queues, CommandRatios(snapshot), preemptors)
    hearing = BrokerHearing.starting(time.monotonic(), settings.agent_offline_timeout)
    probe = SelfProbe(broker, lambda: hearing.heard(time.monotonic()))
    health = HealthCheck(
        hosts,
        SweepStore(engine),
        snapshot,
        broker,
        publisher,
        settings,
        FailureGrace.starting(time.monotonic(), settings.agent_lost_timeout),
        queues,
        LostHosts(
            hosts,
            FenceStore(engine),
            snapshot,
            publisher,
            FencePolicy(has_command=settings.fence_command is not None, restart_unfenced=settings.restart_unfenced),
            None
            if settings.fence_command is None
            else FenceCommand(
                settings.fence_command,
                settings.fence_timeout,
                retry_delay=settings.fence_retry_delay,
                retry_max_delay=settings.fence_retry_max_delay,
            ),
        ),
        hearing,
        fold.progress,
    )
    speakers = Speakers(settings.agent_auth, vhost_of(settings.amqp_url))

    def admit_heartbeat(user_id: str | None, beat: AgentHeartbeat) -> None:
        speakers.check(MessageKind.HEARTBEAT, user_id, beat.agent_id)

    def admit_status(user_id: str | None, report: VmStatusReport) -> None:
        speakers.check(MessageKind.STATUS, user_id, report.agent_id)

    async def on_heartbeat(beat: AgentHeartbeat) -> None:
        hearing.heard(time.monotonic())  # any host's heartbeat says the broker reaches this gateway
        await fold.on_heartbeat(beat)

    heartbeat_consumer = LeanConsumer(
        broker,
        topology.GATEWAY_HEARTBEAT_QUEUE,
        AgentHeartbeat,
        on_heartbeat,
        prefetch=HEARTBEAT_PREFETCH,
        acks=False,
        admit=admit_heartbeat,
    )
    status_consumer = LeanConsumer(
        broker,
        topology.GATEWAY_STATUS_QUEUE,
        VmStatusReport,
        reports.on_status,
        prefetch=STATUS_PREFETCH,
        admit=admit_status,
    )

    @broker.subscriber(
        topology.GATEWAY_ASSIGNED_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="gateway.vm-assigned",
        description="Send each placed VM's create command to its host's queue agent.<host id>.",
    )
    async def on_assigned(event: VmAssigned) -> None:
        await relay.on_assigned(event)

    @broker.subscriber(
        topology.GATEWAY_MIGRATING_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="gateway.vm-migrating",
        description="A migration's target is claimed: send prepare_migration to the target's queue agent.<host id>.",
    )
    async def on_migrating(event: VmMigrating) -> None:
        await tasks.on_migrating(event)

    async def on_ready(background: BackgroundTasks) -> None:
        await heartbeat_consumer.start()
        await status_consumer.start()
        await probe.start()
        hearing.begin(time.monotonic())
        background.start(probe.forever())
        background.start(health.watch_broker())
        background.start(health.forever())
        background.start(
            tasks.sweep_forever(
                migration_timeout=settings.migration_timeout,
                resend_after=settings.resend_stale_after,
                exclude_for=settings.exclude_for,
            )
        )
        background.start(drains.forever())
        background.start(rebalances.forever())
        if settings.agent_auth is AgentAuth.OFF:
            log.warning("VMSCHED_AGENT_AUTH=off: any broker user may send any host's heartbeats and VM reports")
        log.info("gateway ready", agent_auth=settings.agent_auth.value)

    return consumer_app(
        broker,
        on_ready=on_ready,
        closers=[
            probe.stop,
            heartbeat_consumer.stop,
            status_consumer.stop,
            fold.drain,
            reports.drain,
            redis.aclose,
            engine.dispose,
        ],
        logger=log,
        settings=settings,
        metrics_port=GATEWAY_METRICS_PORT,
        checks={"database": database_check(engine), "redis": redis_check(redis)},
        lean_consumers=[heartbeat_consumer, status_consumer],
    )
