"""How a ``vmsched`` command runs: the invocation's options and client (:class:`State`), and errors
as one line on stderr and an exit code of :mod:`vmsched_client.cli.exit_codes`. Every command module
registers its commands with :func:`command`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import httpx
import typer
from pydantic import ValidationError

from vmsched_client import Client, ClientConfig, ConfigError, WaitTimeout
from vmsched_client.cli.exit_codes import ExitCode, for_status
from vmsched_client.cli.options import OutputOption
from vmsched_client.cli.output import Format, stderr
from vmsched_client.errors import ApiError

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class State:
    """The invocation's options (``--url``, ``--token``, ``-o``) and its client, made at first use."""

    url: str | None = None
    token: str | None = None
    output: Format = Format.TABLE
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(config=ClientConfig.load(self.url, self.token))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


# The invocation's options, set by the root app's callback before any command runs.
_current: ContextVar[State] = ContextVar("vmsched_cli_state")


def begin(chosen: State) -> None:
    """Make ``chosen`` the invocation's state (the root app's callback, before any command runs)."""
    _current.set(chosen)


def state() -> State:
    """The invocation's state, as the root app's callback set it."""
    return _current.get()


def sub_app(description: str) -> typer.Typer:
    """A sub-app (``vmsched vms ...``): ``description`` is its help; called bare, it lists its commands."""
    return typer.Typer(help=description, no_args_is_help=True, rich_markup_mode=None)


def fail(message: str, code: ExitCode) -> typer.Exit:
    stderr().print(f"vmsched: {message}", markup=False)
    return typer.Exit(int(code))


@contextmanager
def _one_line_errors(chosen: State) -> Iterator[None]:
    try:
        yield
    except ApiError as error:
        raise fail(error.detail, for_status(error.status_code)) from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors())
        raise fail(problems, ExitCode.USAGE) from None
    except ConfigError as error:
        raise fail(str(error), ExitCode.UNREACHABLE) from None
    except httpx.TransportError as error:
        where = chosen._client.config.url if chosen._client else "the API"
        raise fail(f"cannot reach {where}: {error}", ExitCode.UNREACHABLE) from None
    except WaitTimeout as error:
        raise fail(str(error), ExitCode.NOT_PLACED) from None


def command(group: typer.Typer, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register a command whose client errors end in one line and their exit code. It takes
    ``-o``/``--output`` after its name too (``vmsched vms list -o json``), as well as before."""

    def register(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            chosen = _current.get(State())
            output = kwargs.pop("output", None)
            if isinstance(output, Format):
                chosen.output = output
            with _one_line_errors(chosen):
                return function(*args, **kwargs)

        signature = inspect.signature(function, eval_str=True)  # Typer reads __signature__ as it is
        output = inspect.Parameter("output", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=OutputOption)
        guarded.__signature__ = signature.replace(parameters=[*signature.parameters.values(), output])  # type: ignore[attr-defined]
        guarded.__annotations__ = {**function.__annotations__, "output": OutputOption}
        group.command(name)(guarded)
        return guarded

    return register
