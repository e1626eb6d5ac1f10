"""``vmsched``, the operator CLI, on the client library (needs the ``cli`` extra: Typer and rich)."""

from __future__ import annotations


def main() -> None:
    try:
        from vmsched_client.cli.app import app
    except ImportError as missing:  # the client installed without its cli extra
        raise SystemExit(f"vmsched: the CLI needs {missing.name}: pip install 'vmsched-client[cli]'") from None
    app(prog_name="vmsched")
