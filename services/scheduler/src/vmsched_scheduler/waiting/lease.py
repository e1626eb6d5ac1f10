"""A lease in Redis that one scheduler replica holds at a time; another takes it over once the
holder stops renewing it (crashed, cut off) for ``ttl`` seconds."""

from __future__ import annotations

import uuid

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from vmsched_redis.scripts import render_script


class Lease:
    def __init__(self, redis: Redis, key: str, *, ttl: float) -> None:
        self.key = key
        self.ttl = ttl
        self.owner = uuid.uuid4().hex
        self._script: AsyncScript = redis.register_script(render_script("lease"))

    async def hold(self) -> bool:
        """Take the lease if free, renew it if held: whether this process holds it now."""
        return bool(await self._script(keys=[self.key], args=[self.owner, str(max(1, int(self.ttl * 1000)))]))

    async def give_up(self) -> None:
        await self._script(keys=[self.key], args=[self.owner, "0"])
