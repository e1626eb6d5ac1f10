"""Whether the broker takes this process's messages now.

RabbitMQ stops reading from every publishing connection while a memory or disk alarm is on (the
node's memory past ``vm_memory_high_watermark``, or its free disk under ``disk_free_limit``), and
says so with ``connection.blocked`` (``connection.unblocked`` when the alarm clears). Nothing fails
meanwhile: a publish simply waits for a confirm that does not come. A service that answers a user
after a publish must therefore ask first, and refuse (HTTP 503 with ``Retry-After``) rather than
hang; it goes on by itself once the broker reads again.
"""

from __future__ import annotations

import asyncio

from aio_pika.abc import AbstractConnection

# Seconds a refused client is told to wait: an alarm lasts until the broker pages out or a consumer
# drains its queues, seconds to minutes; a few seconds between asks costs nothing.
BLOCKED_RETRY_AFTER = 5


def publishers_blocked(connection: AbstractConnection | None) -> bool:
    """Whether the broker has blocked ``connection`` (``connection.blocked``, not yet unblocked).

    aiormq keeps the state in the ``asyncio.Event`` its ``Connection.ready()`` waits on, without a
    public name; it is read here, in one place (tests/integration/test_broker_alarm.py proves it
    on a real alarm). A connection that is down or reconnecting is not blocked: that is another
    failure, which publishing reports by itself."""
    underlay = getattr(getattr(connection, "transport", None), "connection", None)
    unblocked = getattr(underlay, "_Connection__connection_unblocked", None)
    return isinstance(unblocked, asyncio.Event) and not unblocked.is_set()
