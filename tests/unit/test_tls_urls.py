"""TLS URLs are settings like any other: amqps://, rediss:// and PostgreSQL's sslmode are accepted,
and the mode reaches the PostgreSQL driver (asyncpg takes it as ``ssl``, not as ``sslmode``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from vmsched_amqp.nodes import node_urls
from vmsched_pg.engine import tls_of
from vmsched_runtime.settings import Settings, describe_error


def test_tls_urls_are_accepted_as_written() -> None:
    settings = Settings.from_environment(
        {
            "VMSCHED_AMQP_URL": "amqps://vmsched:pw@rabbit-a:5671,rabbit-b:5671/prod?cafile=/etc/ca.pem",
            "VMSCHED_REDIS_URL": "rediss://:pw@redis:6380/0?ssl_cert_reqs=required",
            "VMSCHED_DATABASE_URL": "postgresql+asyncpg://vmsched:pw@db:5432/vmsched?sslmode=verify-full",
        }
    )
    assert node_urls(settings.amqp_url) == (
        "amqps://vmsched:pw@rabbit-a:5671/prod?cafile=/etc/ca.pem",
        "amqps://vmsched:pw@rabbit-b:5671/prod?cafile=/etc/ca.pem",
    )
    assert str(settings.redis_url).startswith("rediss://")
    url, connect_args = tls_of(make_url(settings.sqlalchemy_url))
    assert connect_args == {"ssl": "verify-full"}
    assert "sslmode" not in str(url)
    assert url.render_as_string(hide_password=False) == "postgresql+asyncpg://vmsched:pw@db:5432/vmsched"


def test_asyncpgs_own_spelling_is_accepted_too_and_no_mode_means_the_drivers_default() -> None:
    assert tls_of(make_url("postgresql+asyncpg://db/x?ssl=require"))[1] == {"ssl": "require"}
    assert tls_of(make_url("postgresql+asyncpg://db/x"))[1] == {}


def test_an_unknown_sslmode_stops_the_service_at_start_naming_the_valid_ones() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.from_environment({"VMSCHED_DATABASE_URL": "postgresql+asyncpg://db/x?sslmode=sometimes"})
    line = describe_error(refused.value)
    assert "VMSCHED_DATABASE_URL" in line
    assert "verify-full" in line
