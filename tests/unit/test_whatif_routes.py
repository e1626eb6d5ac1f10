"""The what-if routes in process: a Redis that does not answer is a 503 that says so, and bad
questions are 422 before anything is read."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from tests.unit.test_api_requests import TOKEN, in_memory_services, in_process
from vmsched_api.app import build_app
from vmsched_runtime.settings import Settings


class SilentRedis:
    async def read_all(self) -> Any:
        raise RedisConnectionError("Connection refused")


async def test_an_unreadable_snapshot_is_a_503_naming_it() -> None:
    settings = Settings(bootstrap_token=TOKEN)
    snapshot: Any = SilentRedis()
    app = build_app(settings, migrate=False, services=in_memory_services(settings, snapshot=snapshot))
    async with in_process(app) as client:
        capacity = await client.get("/v1/capacity", params={"cpu": 1})
        simulated = await client.post("/v1/placement/simulate", json={"vms": [{"name": "x", "disk_gb": 1}]})
    for answer in (capacity, simulated):
        assert answer.status_code == 503
        assert answer.json()["detail"].startswith("the capacity snapshot cannot be read")


async def test_bad_questions_are_422_before_anything_is_read() -> None:
    settings = Settings(bootstrap_token=TOKEN)
    app = build_app(settings, migrate=False, services=in_memory_services(settings))  # any read would raise
    async with in_process(app) as client:
        assert (await client.get("/v1/capacity", params={"cpu": 0})).status_code == 422
        assert (await client.get("/v1/capacity", params={"gpu": -1})).status_code == 422
        assert (await client.post("/v1/placement/simulate", json={"vms": []})).status_code == 422
        assert (await client.post("/v1/placement/simulate", json={"vms": [{"name": "x"}]})).status_code == 422
        bad_strategy = {"vms": [{"name": "x", "disk_gb": 1}], "strategy": "fastest"}
        assert (await client.post("/v1/placement/simulate", json=bad_strategy)).status_code == 422
