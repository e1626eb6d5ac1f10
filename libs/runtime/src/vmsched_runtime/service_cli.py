"""The command line of every vmsched service: ``--help`` describes it and starts nothing; a service
that cannot start says why in one line on stderr and exits non-zero, without a traceback.

Exit codes: 0 stopped cleanly, 1 could not start or stopped on an error, 2 a setting is invalid.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import typer

from vmsched_common.settings import ENV_PREFIX, Settings, load_settings

CONNECT_TIMEOUT = 5.0


class Server(StrEnum):
    BROKER = "RabbitMQ"
    REDIS = "Redis"
    DATABASE = "PostgreSQL"


SETTING_OF = {
    Server.BROKER: f"{ENV_PREFIX}AMQP_URL",
    Server.REDIS: f"{ENV_PREFIX}REDIS_URL",
    Server.DATABASE: f"{ENV_PREFIX}DATABASE_URL",
}


def redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def url_of(server: Server, settings: Settings) -> str:
    if server is Server.BROKER:
        return str(settings.amqp_url)
    if server is Server.REDIS:
        return str(settings.redis_url)
    return settings.sqlalchemy_url


async def _reach(server: Server, settings: Settings, *, database_must_exist: bool) -> None:
    if server is Server.BROKER:
        import aio_pika

        from vmsched_common.amqp_nodes import node_urls

        # Reachable when any node of the cluster answers: that is all the services need.
        failures: list[BaseException] = []
        for node in node_urls(settings.amqp_url):
            try:
                broker = await aio_pika.connect(node, timeout=CONNECT_TIMEOUT)
            except Exception as error:  # reported if every node fails
                failures.append(error)
                continue
            await broker.close()
            return
        raise failures[-1]
    elif server is Server.REDIS:
        from redis.asyncio import Redis

        client = Redis.from_url(str(settings.redis_url), socket_connect_timeout=CONNECT_TIMEOUT)
        try:
            await client.ping()
        finally:
            await client.aclose()
    else:
        from vmsched_common.db.engine import connect_directly

        database = await connect_directly(
            settings.sqlalchemy_url, database=None if database_must_exist else "postgres", timeout=CONNECT_TIMEOUT
        )
        await database.close()


def _why(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def unreachable(settings: Settings, servers: Sequence[Server], *, database_must_exist: bool = True) -> list[str]:
    """One line per server among ``servers`` that does not answer, naming it, its setting and why.
    The clients' own log lines about the failure are held back: the one line says it all."""
    problems = []
    logging.disable(logging.CRITICAL)
    try:
        for server in servers:
            problems += await _problem(server, settings, database_must_exist=database_must_exist)
    finally:
        logging.disable(logging.NOTSET)
    return problems


async def _problem(server: Server, settings: Settings, *, database_must_exist: bool) -> list[str]:
    try:
        await asyncio.wait_for(_reach(server, settings, database_must_exist=database_must_exist), CONNECT_TIMEOUT * 2)
    except Exception as error:
        hint = ""
        if server is Server.DATABASE and "does not exist" in str(error):
            hint = " (vmsched-api creates and migrates it: start the API first)"
        return [
            f"cannot reach {server.value} at {redacted(url_of(server, settings))} "
            f"({SETTING_OF[server]}): {_why(error)}{hint}"
        ]
    return []


def settings_help() -> str:
    """The environment variables every service reads, for ``--help``."""
    rows = []
    for name, field in Settings.model_fields.items():
        variable = str(field.validation_alias) if field.validation_alias else f"{ENV_PREFIX}{name.upper()}"
        default = field.default
        shown = "unset" if default in (None, "") else str(default)
        rows.append(f"  {variable} (default: {shown})")
    return "Settings, from the environment:\n\n" + "\n\n".join(rows)


def fail(service: str, line: str, code: int = 1) -> NoReturn:
    print(f"{service}: {line}", file=sys.stderr)
    raise SystemExit(code)


def service_main(
    service: str,
    summary: str,
    serve: Callable[[Settings], None],
    *,
    needs: Sequence[Server] = (Server.BROKER, Server.REDIS, Server.DATABASE),
    database_must_exist: bool = True,
    commands: Sequence[Callable[..., None]] = (),
) -> Callable[[], None]:
    """The console script's ``main``: a Typer app that serves when called without a command. The
    ``commands`` (Typer command functions, named after the function: ``enroll_agent`` is
    ``enroll-agent``) are tools beside it."""
    app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)

    def run() -> None:
        settings = load_settings(service)
        problems = asyncio.run(unreachable(settings, needs, database_must_exist=database_must_exist))
        if problems:
            fail(service, "; ".join(problems))
        try:
            serve(settings)
        except KeyboardInterrupt:
            return
        except Exception as error:
            fail(service, f"stopped: {_why(error)}")

    if not commands:
        app.command(help=summary, epilog=settings_help())(run)
    else:

        @app.callback(invoke_without_command=True, help=summary, epilog=settings_help())
        def serve_unless_told(context: typer.Context) -> None:
            if context.invoked_subcommand is None:
                run()

        for command in commands:
            app.command()(command)

    def main() -> None:
        app(prog_name=service)

    return main
