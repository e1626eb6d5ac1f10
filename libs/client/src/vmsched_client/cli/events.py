"""``vmsched events``: follow the live events (``GET /v1/events``), a line each."""

from __future__ import annotations

import itertools
import json
from typing import Annotated

import typer

from vmsched_client.cli.command import command, state
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_client.cli.output import Format, stdout

commands = typer.Typer()  # merged into the root app: `vmsched events`


@command(commands, "events")
def events(
    event_type: Annotated[list[str], typer.Option("--type", "-t", help="only these types (e.g. vm.assigned)")] = [],  # noqa: B006
    project: Annotated[str | None, typer.Option(help="only this project's events")] = None,
    since: Annotated[str | None, typer.Option(help="resume after this event id")] = None,
    count: Annotated[int | None, typer.Option(min=1, help="stop after this many events")] = None,
) -> None:
    """Follow the live events (Ctrl-C stops): a line each; -o json: one JSON object a line."""
    chosen = state()
    stream = chosen.client().watch(types=event_type or None, project=project, last_event_id=since)
    try:
        for event in itertools.islice(stream, count):
            if chosen.output is Format.JSON:
                print(json.dumps({"id": event.id, "type": event.type, "data": event.data}), flush=True)
            else:
                data = event.data if isinstance(event.data, str) else json.dumps(event.data, separators=(",", ":"))
                stdout().print(f"{event.id or '-'}  {event.type}  {data}", markup=False, soft_wrap=True)
    except KeyboardInterrupt:
        raise typer.Exit(int(ExitCode.OK)) from None
    finally:
        stream.close()  # the connection, at once
