"""The fault tests' TCP proxy (tests/faults/proxy.py) against an echo server of the test's own:
open passes bytes, refused refuses and resets, blackholed holds bytes until healed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.faults.proxy import LinkState, Proxies


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    yield port
    server.close()


@pytest.fixture
def proxies() -> Iterator[Proxies]:
    running = Proxies()
    yield running
    running.close()


async def say(port: int, text: bytes, *, within: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(text)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(text)), within)
    finally:
        writer.close()


async def test_an_open_link_passes_bytes_both_ways(echo: int, proxies: Proxies) -> None:
    link = proxies.add("echo", f"tcp://127.0.0.1:{echo}")
    assert await say(link.port, b"hello") == b"hello"
    assert link.url("amqp://guest:pw@127.0.0.1:5672/vh") == f"amqp://guest:pw@127.0.0.1:{link.port}/vh"


async def test_a_refused_link_refuses_new_connections_and_resets_open_ones(echo: int, proxies: Proxies) -> None:
    link = proxies.add("echo", f"tcp://127.0.0.1:{echo}")
    reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
    writer.write(b"x")
    assert await reader.readexactly(1) == b"x"

    with proxies.cut("echo", LinkState.REFUSED):
        assert await asyncio.wait_for(reader.read(1), 2) == b""  # reset: read ends
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", link.port)

    assert await say(link.port, b"again") == b"again"
    writer.close()


async def test_a_blackholed_link_holds_bytes_until_it_heals(echo: int, proxies: Proxies) -> None:
    link = proxies.add("echo", f"tcp://127.0.0.1:{echo}")
    reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
    proxies.blackhole("echo")
    writer.write(b"held")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(4), 0.5)
    fresh = await asyncio.open_connection("127.0.0.1", link.port)  # accepted, and silent
    fresh[1].write(b"new")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(fresh[0].readexactly(3), 0.5)

    proxies.heal("echo")

    assert await asyncio.wait_for(reader.readexactly(4), 2) == b"held"
    assert await asyncio.wait_for(fresh[0].readexactly(3), 2) == b"new"
    writer.close()
    fresh[1].close()
