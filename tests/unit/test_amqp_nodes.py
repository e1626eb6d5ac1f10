"""VMSCHED_AMQP_URL naming several nodes: parsed once, one URL per node with the cluster's credentials."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vmsched_amqp.broker import make_broker
from vmsched_amqp.nodes import NodeRotatingConnection, node_urls
from vmsched_runtime.settings import Settings


def test_a_single_node_url_is_its_own_only_node() -> None:
    assert node_urls(Settings(amqp_url="amqp://guest:guest@127.0.0.1:5672/").amqp_url) == (
        "amqp://guest:guest@127.0.0.1:5672/",
    )


def test_every_node_gets_the_credentials_virtual_host_and_query_written_once() -> None:
    url = Settings(amqp_url="amqp://u:p%40ss@a:5701,b:5702,c/cell-1?heartbeat=5").amqp_url
    assert node_urls(url) == (
        "amqp://u:p%40ss@a:5701/cell-1?heartbeat=5",
        "amqp://u:p%40ss@b:5702/cell-1?heartbeat=5",
        "amqp://u:p%40ss@c:5672/cell-1?heartbeat=5",
    )


def test_amqps_nodes_default_to_the_tls_port() -> None:
    assert node_urls("amqps://u:p@a,b:5999/") == ("amqps://u:p@a:5671/", "amqps://u:p@b:5999/")


@pytest.mark.parametrize("url", ["http://a:5672/", "amqp://", "redis://a/0"])
def test_a_url_that_is_not_amqp_is_refused_with_the_setting_named(url: str) -> None:
    with pytest.raises(ValidationError, match="amqp_url"):
        Settings(amqp_url=url)


def test_a_broker_of_one_node_connects_as_aio_pika_does() -> None:
    broker = make_broker(Settings(amqp_url="amqp://guest:guest@127.0.0.1:5672/"))
    assert "connection_class" not in broker._connection_kwargs


def test_a_broker_of_several_nodes_rotates_and_waits_for_any_node() -> None:
    broker = make_broker(Settings(amqp_url="amqp://guest:guest@a:5701,b:5702/"))
    assert broker._connection_kwargs["url"] == "amqp://guest:guest@a:5701/"
    assert broker._connection_kwargs["fail_fast"] is False
    assert broker._connection_kwargs["connection_class"].keywords["nodes"] == (
        "amqp://guest:guest@a:5701/",
        "amqp://guest:guest@b:5702/",
    )


async def test_each_connection_attempt_goes_to_the_next_node_and_logs_hide_the_password() -> None:
    nodes = ("amqp://u:secret@a:5701/", "amqp://u:secret@b:5702/", "amqp://u:secret@c:5703/")
    from yarl import URL

    connection = NodeRotatingConnection(URL(nodes[0]), nodes=nodes, reconnect_interval=1.0)
    try:
        attempts = [connection.url.port for _ in range(4)]
        assert attempts == [5701, 5702, 5703, 5701]
        assert "secret" not in str(connection)
        assert "secret" not in repr(connection)
        assert str(connection).count("******") == 3
    finally:
        # Closed here: aio-pika's finalizer closes a connection left open, and garbage collected
        # during a later test with no event loop running, that close is a coroutine never awaited.
        await connection.close()
