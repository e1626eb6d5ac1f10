"""Channels that no reconnection restores, for what a reconnecting connection must not repeat.

aio-pika's robust connection declares again, after every reconnection, each queue and binding made
on its channels. A declaration RabbitMQ refuses then fails the whole reconnection: a classic queue
whose node is down (NOT_FOUND, "home node ... is down or inaccessible") keeps every service sharing
the connection offline for as long as that node is (docs/deploy.md, "A broker cluster"). What may
be refused is declared on a channel of this kind instead, by code that handles the refusal.
"""

from __future__ import annotations

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection


async def plain_channel(connection: AbstractConnection, *, publisher_confirms: bool = False) -> AbstractChannel:
    """A channel of ``connection`` that nothing reopens and nothing declares again. RabbitMQ closes
    a channel on a refused declaration; the caller opens another."""
    channel = aio_pika.Channel(connection, publisher_confirms=publisher_confirms)
    await channel.initialize()
    return channel
