"""Write vmsched_client's blocking client (``sync.py``) from its asyncio client (``aio.py``), the one
source of both. ``make sync-client`` runs it; tests/unit/test_client_sync_generated.py fails while
the committed ``sync.py`` differs from what it writes.

Three steps: unasync takes ``async`` and ``await`` out and renames the asyncio names (``RENAMED``);
``FIXES`` say what a renaming cannot (the sleep that is not awaited, the generator's return type), and
the module docstring becomes ``SYNC_DOCSTRING``; ruff then drops the imports left unused, sorts them
and formats the file, as ``make lint`` wants it."""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "libs" / "client" / "src" / "vmsched_client"
ASYNC_CLIENT = PACKAGE / "aio.py"
SYNC_CLIENT = PACKAGE / "sync.py"

# httpx's asyncio names and their blocking twins, and ours (unasync knows the standard library's).
RENAMED = {
    "AsyncClient": "Client",  # httpx.AsyncClient -> httpx.Client, and ours
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
}
# What renaming cannot do, as (what unasync wrote, what the blocking client says): each must be
# found exactly once, so that a change of aio.py that a fix no longer fits stops the generation.
FIXES = [
    ("sleep: Callable[[float], Awaitable[None]] = asyncio.sleep", "sleep: Callable[[float], None] = time.sleep"),
    ("-> Generator[Event, None]:", "-> Generator[Event, None, None]:"),
]
SYNC_DOCSTRING = '''"""The blocking client: ``with Client() as vmsched: vmsched.create_vm(...)``.

Written from :mod:`vmsched_client.aio` by ``make sync-client`` (devtools/sync_client.py): change
that file and run it, never this one; a test fails while the two differ."""'''


class GenerationError(Exception):
    """aio.py no longer has what the generation expects of it."""


def unasynced(source: str) -> str:
    """``source`` with ``async``/``await`` taken out and the asyncio names renamed (unasync)."""
    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / ASYNC_CLIENT.name
        written.write_text(source)
        unasync.unasync_files([str(written)], [unasync.Rule(ASYNC_CLIENT.name, SYNC_CLIENT.name, RENAMED)])
        return (Path(folder) / SYNC_CLIENT.name).read_text()


def with_sync_docstring(source: str) -> str:
    """``source`` with its module docstring replaced by the blocking client's."""
    module = ast.parse(source)
    if ast.get_docstring(module) is None:
        raise GenerationError(f"{ASYNC_CLIENT.name} starts with no docstring")
    rest = source.splitlines(keepends=True)[module.body[0].end_lineno or 0 :]
    return SYNC_DOCSTRING + "\n" + "".join(rest)


def fixed(source: str) -> str:
    for found, meant in FIXES:
        if source.count(found) != 1:
            raise GenerationError(f"{found!r} stands {source.count(found)} times in the unasynced {ASYNC_CLIENT.name}")
        source = source.replace(found, meant)
    return source


def ruff(source: str, *command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(SYNC_CLIENT), "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise GenerationError(f"ruff {' '.join(command)} refused the blocking client:\n{done.stdout}{done.stderr}")
    return done.stdout


def sync_client(async_source: str) -> str:
    """The blocking client's source, from the asyncio client's."""
    source = fixed(with_sync_docstring(unasynced(async_source)))
    # A page's ``for item in page.items: yield item`` (an async generator cannot ``yield from``)
    # becomes ``yield from page.items``: an unsafe fix in general, not on a list.
    linted = ruff(source, "check", "--fix", "--quiet", "--config", "lint.extend-safe-fixes = ['UP028']")
    return ruff(linted, "format", "--quiet")


def main() -> int:
    try:
        SYNC_CLIENT.write_text(sync_client(ASYNC_CLIENT.read_text()))
    except GenerationError as error:
        print(f"sync-client: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
