"""The transport's floor: what one AMQP hop costs on this machine, before any vmsched code runs.

    python bench/broker_floor.py [--out bench/results/broker-floor-<date>.json]

A placement crosses RabbitMQ through ``vm.create`` and ``vm.assigned`` (quorum queues, shared by the
VMs of one request), the create command (one of thousands of classic ``agent.<host>`` queues, not
persistent) and ``vm.status`` (a quorum queue), confirmed and acked. This measures, on an own vhost:

- the broker's CPU per message (beam.smp's CPU time / messages) for each kind of hop at fixed
  offered rates, publishing with confirms and consuming with acks, and the CPU per placement that
  follows (one quorum hop and one transient classic hop per VM; the batched messages are counted
  by the end-to-end harness, which adds them);
- the client's CPU per message for consuming and publishing with plain aio-pika and with FastStream
  as the services use it (``make_broker``: confirms, telemetry, log context, dead-letter middleware).

From these, the ceiling the broker alone puts on placements per second on this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import aio_pika
from aio_pika.abc import FieldValue
from faststream.rabbit import RabbitQueue

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmsched_amqp.broker import make_broker  # noqa: E402
from vmsched_contract.messages import AgentCommand, CommandAction, Resources  # noqa: E402
from vmsched_runtime.logs import configure_logging  # noqa: E402
from vmsched_runtime.settings import Settings  # noqa: E402
from vmsched_runtime.telemetry import setup_tracing  # noqa: E402

BASE_AMQP = os.environ.get("VMSCHED_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
RATES = (300.0, 1500.0, None)  # None: as fast as confirms come back
AGENT_QUEUES = 1000
WINDOW = 256  # publishes awaiting their confirm at once
BODY = AgentCommand(
    action=CommandAction.CREATE,
    vm_id=uuid.UUID(int=1),
    name="floor",
    resources=Resources(cpu=1, memory_mb=512, disk_gb=1),
    attempt=1,
).model_dump_json()


def _rabbitmqctl(*args: str) -> str:
    return subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=120).stdout


def broker_cpu_seconds() -> float:
    """CPU time of the RabbitMQ node (the beam.smp process running ``rabbit``)."""
    pids = subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True).stdout.split()
    fields = Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def paced(count: int, rate: float | None, send: Callable[[int], Awaitable[None]]) -> None:
    """``send(i)`` for i < count at ``rate`` a second (None: flat out), at most WINDOW unconfirmed."""
    window = asyncio.Semaphore(WINDOW)
    began = time.monotonic()

    async def one(i: int) -> None:
        async with window:
            await send(i)

    tasks = []
    for i in range(count):
        if rate is not None:
            delay = began + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)


async def broker_hop(
    url: str, *, quorum: bool, queues: int, rate: float | None, count: int, persistent: bool = True
) -> dict[str, Any]:
    """Publish ``count`` messages round robin over ``queues`` queues with confirms, consume them with
    acks (prefetch 32 per consumer), and read the broker's CPU per message."""
    mode = aio_pika.DeliveryMode.PERSISTENT if persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
    connection = await aio_pika.connect(url)
    try:
        publishing = await connection.channel(publisher_confirms=True)
        consuming = await connection.channel()
        await consuming.set_qos(prefetch_count=32)
        tag = uuid.uuid4().hex[:6]
        exchange = await publishing.declare_exchange(f"floor-{tag}", aio_pika.ExchangeType.DIRECT, auto_delete=True)
        done = asyncio.Event()
        received = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received == count:
                done.set()

        arguments: dict[str, FieldValue] = {"x-queue-type": "quorum"} if quorum else {}
        declared = []
        for n in range(queues):
            queue = await consuming.declare_queue(f"floor-{tag}-{n}", durable=True, arguments=arguments)
            await queue.bind(exchange, routing_key=str(n))
            declared.append((queue, await queue.consume(on_message)))

        async def send(i: int) -> None:
            message = aio_pika.Message(BODY.encode(), message_id=str(i), delivery_mode=mode)
            await exchange.publish(message, routing_key=str(i % queues))

        broker_before, began = broker_cpu_seconds(), time.monotonic()
        await paced(count, rate, send)
        await asyncio.wait_for(done.wait(), timeout=300)
        broker_used, seconds = broker_cpu_seconds() - broker_before, time.monotonic() - began
        for queue, consumer_tag in declared:
            await queue.cancel(consumer_tag)  # before the delete, or the broker cancels it with a warning
            await queue.delete(if_unused=False, if_empty=False)
    finally:
        await connection.close()
    return {
        "queue": "quorum" if quorum else "classic",
        "persistent": persistent or quorum,
        "queues": queues,
        "offered_per_s": rate,
        "achieved_per_s": round(count / seconds, 1),
        "broker_us_per_message": round(broker_used * 1e6 / count, 1),
    }


async def client_costs(url: str, count: int) -> dict[str, float]:
    """The client's CPU per message: consume + ack, and publish with confirm; aio-pika and FastStream."""
    queue_name = f"floor-client-{uuid.uuid4().hex[:6]}"
    connection = await aio_pika.connect(url)
    channel = await connection.channel(publisher_confirms=True)
    queue = await channel.declare_queue(queue_name, durable=True, arguments={"x-queue-type": "quorum"})
    results: dict[str, float] = {}
    try:

        async def raw_publish(i: int) -> None:
            message = aio_pika.Message(BODY.encode(), message_id=str(i), delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            await channel.default_exchange.publish(message, routing_key=queue_name)

        before = client_cpu_seconds()
        await paced(count, None, raw_publish)
        results["aio_pika_publish_us"] = round((client_cpu_seconds() - before) * 1e6 / count, 1)

        consumer = await connection.channel()
        await consumer.set_qos(prefetch_count=256)
        done = asyncio.Event()
        seen = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal seen
            AgentCommand.model_validate_json(message.body)
            await message.ack()
            seen += 1
            if seen == count:
                done.set()

        before = client_cpu_seconds()
        tag = await (await consumer.get_queue(queue_name)).consume(on_message)
        await asyncio.wait_for(done.wait(), timeout=300)
        results["aio_pika_consume_us"] = round((client_cpu_seconds() - before) * 1e6 / count, 1)
        await (await consumer.get_queue(queue_name)).cancel(tag)

        broker = make_broker(Settings(amqp_url=url), prefetch=256)
        handled = 0
        finished = asyncio.Event()

        @broker.subscriber(RabbitQueue(queue_name, declare=False))  # declared above
        async def handler(command: AgentCommand) -> None:
            nonlocal handled
            handled += 1
            if handled == count:
                finished.set()

        await broker.connect()
        command = AgentCommand.model_validate_json(BODY)

        async def faststream_publish(i: int) -> None:
            await broker.publish(command, queue=queue_name, message_id=str(i), persist=True)

        before = client_cpu_seconds()
        await paced(count, None, faststream_publish)
        results["faststream_publish_us"] = round((client_cpu_seconds() - before) * 1e6 / count, 1)
        before = client_cpu_seconds()
        await broker.start()
        await asyncio.wait_for(finished.wait(), timeout=300)
        results["faststream_consume_us"] = round((client_cpu_seconds() - before) * 1e6 / count, 1)
        await broker.stop()
    finally:
        await queue.delete(if_unused=False, if_empty=False)
        await connection.close()
    return results


def hop_cost(hops: list[dict[str, Any]], kind: str, rate: float | None) -> float:
    """Broker CPU per message of one kind of hop (``quorum``, ``command``) at ``rate``."""
    if kind == "quorum":
        return float(
            next(h for h in hops if h["queue"] == "quorum" and h["offered_per_s"] == rate)["broker_us_per_message"]
        )
    return float(
        next(h for h in hops if h["queue"] == "classic" and not h["persistent"] and h["offered_per_s"] == rate)[
            "broker_us_per_message"
        ]
    )


def placement_cost(hops: list[dict[str, Any]], rate: float | None) -> float:
    """Broker CPU per placement at ``rate``: its report through a quorum queue and its command into an
    agent queue (the batched vm.create and vm.assigned add a share the end-to-end harness counts)."""
    return hop_cost(hops, "quorum", rate) + hop_cost(hops, "command", rate)


async def measure(url: str, count: int, agent_queues: int) -> dict[str, Any]:
    hops = []
    for rate in RATES:
        for quorum, queues, persistent in ((True, 1, True), (False, agent_queues, True), (False, agent_queues, False)):
            hop = await broker_hop(url, quorum=quorum, queues=queues, rate=rate, count=count, persistent=persistent)
            print(f"  {hop}", flush=True)
            hops.append(hop)
    client = await client_costs(url, count)
    print(f"  client: {client}", flush=True)
    cores = os.cpu_count() or 1
    per_placement = {str(rate or "max"): round(placement_cost(hops, rate), 1) for rate in RATES}
    return {
        "hops": hops,
        "client_us_per_message": client,
        "broker_us_per_placement": per_placement,
        "broker_only_ceiling_per_s": {rate: round(cores * 1e6 / us, 0) for rate, us in per_placement.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="RabbitMQ and client cost per message on this machine")
    today = datetime.now(UTC).date().isoformat()
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"broker-floor-{today}.json")
    parser.add_argument("--messages", type=int, default=6000)
    parser.add_argument("--agent-queues", type=int, default=AGENT_QUEUES, help="classic queues of the agent hop")
    options = parser.parse_args()
    configure_logging("broker-floor", "WARNING", "json")
    setup_tracing("broker-floor", Settings())  # as the services run: trace ids, nothing exported
    vhost = f"vmsched-floor-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", vhost)
    parts = urlsplit(BASE_AMQP)
    _rabbitmqctl("set_permissions", "-p", vhost, parts.username or "guest", ".*", ".*", ".*")
    url = urlunsplit((parts.scheme, parts.netloc, "/" + quote(vhost, safe=""), "", ""))
    print("== broker floor", flush=True)
    try:
        result = asyncio.run(measure(url, options.messages, options.agent_queues))
    finally:
        _rabbitmqctl("delete_vhost", vhost)
    result = {
        "benchmark": "broker-floor",
        "recorded_at": datetime.now(UTC).isoformat(),
        "messages_per_measurement": options.messages,
        "agent_queues": options.agent_queues,
        "cpu_count": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        **result,
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"broker CPU per placement (us) by offered rate: {result['broker_us_per_placement']}")
    print(f"placements/s the broker alone allows on {os.cpu_count()} cores: {result['broker_only_ceiling_per_s']}")
    print(f"saved {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
