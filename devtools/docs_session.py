"""Run a page's shell examples in order, as a reader pasting them into one shell would.

Every fenced ```` ```bash ```` block of the page is run, in the page's order, by one
``bash -euo pipefail`` (other fences, ```` ```sh ```` or ```` ```console ````, are shown, not run):
a command that fails stops the run and fails it. ``curl`` is run with ``--fail-with-body``, so an
HTTP error answer fails too, as it would fail a reader's expectations, unless the curl writes out
its status (``-w '%{http_code}'``): that one shows an error on purpose. The page's
``localhost:8000`` (and the scheduler's and gateway's ``9101``, ``9102``) are the running stack's.

Against ``make run`` (in another shell), from the checkout::

    .venv/bin/python -m devtools.docs_session README.md docs/walkthrough.md
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools.stack import ROOT

RUN_FENCE = "bash"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def shell_blocks(page: Path) -> list[str]:
    """The page's ```` ```bash ```` blocks, in order."""
    return [body for fence, body in _BLOCK.findall(page.read_text()) if fence == RUN_FENCE]


@dataclass(frozen=True)
class Where:
    """Where the stack the examples talk to listens (make run's ports unless told otherwise)."""

    api: str = "localhost:8000"
    scheduler_metrics: str = "localhost:9101"
    gateway_metrics: str = "localhost:9102"
    replacements: Mapping[str, str] = field(default_factory=dict)

    def apply(self, script: str) -> str:
        for written, actual in {
            "localhost:8000": self.api,
            "127.0.0.1:8000": self.api,
            "localhost:9101": self.scheduler_metrics,
            "localhost:9102": self.gateway_metrics,
            **self.replacements,
        }.items():
            script = script.replace(written, actual)
        return script


def _curl_that_fails_on_errors(bin_dir: Path) -> None:
    real = shutil.which("curl")
    if real is None:
        raise RuntimeError("curl is not installed")
    shim = bin_dir / "curl"
    # A curl that writes out its status (-w '%{http_code}') shows an error answer on purpose.
    shim.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in -w|-w*|--write-out) exec ' + real + ' "$@";; esac; done\n'
        f'exec {real} --fail-with-body "$@"\n'
    )
    shim.chmod(0o755)


def run_pages(
    pages: Sequence[Path], where: Where, workdir: Path, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run every page's blocks in one shell in ``workdir`` (a checkout, or a stand-in for one with
    ``.run/dev-token`` and ``.venv``); the shell's trace (``set -x``) and output, merged."""
    # Each traced command with the seconds since the start (bash takes no PS4 from the environment).
    script = "PS4='+ [${SECONDS} s] '\n" + "\n".join(
        where.apply(block) for page in pages for block in shell_blocks(page)
    )
    with tempfile.TemporaryDirectory(prefix="docs-session-") as shims:
        bin_dir = Path(shims)
        _curl_that_fails_on_errors(bin_dir)
        return subprocess.run(
            ["bash", "-euxo", "pipefail", "-c", script],
            cwd=workdir,
            env={**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--api", default="localhost:8000")
    parser.add_argument("--timeout", type=float, default=600.0)
    options = parser.parse_args()
    env = {**os.environ, "VMSCHED_URL": f"http://{options.api}"}
    done = run_pages(options.pages, Where(api=options.api), ROOT, env, options.timeout)
    print(done.stdout)
    print(f"exit {done.returncode}", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
