"""The blocking client is written from the asyncio one (``make sync-client``): the committed
sync.py is exactly what the generation writes now, so a change of aio.py reaches both clients."""

from __future__ import annotations

import inspect

import pytest

from devtools.sync_client import ASYNC_CLIENT, SYNC_CLIENT, GenerationError, sync_client
from vmsched_client import AsyncClient, Client


def test_the_committed_blocking_client_is_the_one_written_from_the_asyncio_client() -> None:
    assert SYNC_CLIENT.read_text() == sync_client(ASYNC_CLIENT.read_text()), "run make sync-client"


def test_both_clients_have_the_same_methods() -> None:
    def methods(client: type) -> set[str]:
        return {name for name, member in vars(client).items() if inspect.isfunction(member)}

    renamed = {"__aenter__": "__enter__", "__aexit__": "__exit__"}
    assert {renamed.get(name, name) for name in methods(AsyncClient)} == methods(Client)


def test_a_fix_the_asyncio_client_no_longer_fits_stops_the_generation() -> None:
    changed = ASYNC_CLIENT.read_text().replace("-> AsyncGenerator[Event, None]:", "-> AsyncIterator[Event]:")
    with pytest.raises(GenerationError, match="Generator"):
        sync_client(changed)
