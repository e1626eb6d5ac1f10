"""The command line of every vmsched service: ``--help`` describes it and starts nothing; a service
that cannot start says why in one line on stderr and exits non-zero, without a traceback.

Exit codes: 0 stopped cleanly, 1 could not start or stopped on an error, 2 a setting is invalid.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import typer

from vmsched_runtime.reachability import Server, unreachable, why
from vmsched_runtime.settings import ENV_PREFIX, Settings, load_settings


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
    needs: Sequence[Server],
    commands: Sequence[Callable[..., None]] = (),
) -> Callable[[], None]:
    """The console script's ``main``: a Typer app that serves when called without a command, once
    every server of ``needs`` answers. The ``commands`` (Typer command functions, named after the
    function: ``enroll_agent`` is ``enroll-agent``) are tools beside it."""
    app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)

    def run() -> None:
        settings = load_settings(service)
        problems = asyncio.run(unreachable(settings, needs))
        if problems:
            fail(service, "; ".join(problems))
        try:
            serve(settings)
        except KeyboardInterrupt:
            return
        except Exception as error:
            fail(service, f"stopped: {why(error)}")

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
