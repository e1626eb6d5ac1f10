"""The gateway process: FastStream consumers of heartbeats, assignments and VM status."""

from __future__ import annotations

from faststream import FastStream
from faststream.middlewares import AckPolicy

from vmsched_common import events, topology
from vmsched_common.amqp import make_broker
from vmsched_common.background import BackgroundTasks, consumer_app
from vmsched_common.connections import connect_redis
from vmsched_common.db.engine import create_engine
from vmsched_common.logs import get_logger
from vmsched_common.messages import VmAssigned, VmDeleted, VmStatusReport
from vmsched_common.settings import Settings
from vmsched_common.snapshot import Snapshot
from vmsched_gateway.health import check_hosts_forever
from vmsched_gateway.heartbeat_intake import HeartbeatIntake
from vmsched_gateway.service import Gateway
from vmsched_gateway.store import GatewayStore

log = get_logger(__name__)


def build_app(settings: Settings) -> FastStream:
    broker = make_broker(settings, prefetch=256)
    engine = create_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size or 6, pre_ping=False)
    redis = connect_redis(settings)
    snapshot = Snapshot(redis, settings.redis_key_prefix)
    store = GatewayStore(engine, max_attempts=settings.max_attempts)

    deleted = events.vm_deleted(broker)

    async def publish_deleted(event: VmDeleted) -> None:
        await deleted.publish(event, message_id=f"{event.vm_id}:deleted")

    gateway = Gateway(settings=settings, broker=broker, store=store, snapshot=snapshot, publish_deleted=publish_deleted)

    heartbeats = HeartbeatIntake(broker, gateway.on_heartbeat)

    @broker.subscriber(
        topology.GATEWAY_ASSIGNED_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="gateway.vm-assigned",
    )
    async def on_assigned(event: VmAssigned) -> None:
        await gateway.on_assigned(event)

    @broker.subscriber(
        topology.GATEWAY_STATUS_QUEUE,
        topology.EXCHANGE,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="gateway.vm-status",
    )
    async def on_status(report: VmStatusReport) -> None:
        await gateway.on_status(report)

    async def on_ready(background: BackgroundTasks) -> None:
        await heartbeats.start()
        background.start(check_hosts_forever(store, snapshot, broker, settings))
        log.info("gateway ready")

    return consumer_app(
        broker,
        on_ready=on_ready,
        closers=[heartbeats.stop, gateway.drain, redis.aclose, engine.dispose],
        logger=log,
        settings=settings,
    )
