"""The complete programs docs/ shows (an agent, a subscriber) type-check against the
code as it is: a renamed argument or a changed type fails here, not in a reader's hands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "client.md", ROOT / "docs" / "agent-sdk.md", ROOT / "docs" / "events.md"]
# Whole programs, not fragments: they run as they are.
COMPLETE = ("asyncio.run(main())", "app = FastStream(broker)")


def programs() -> dict[str, str]:
    found = {}
    for page in PAGES:
        for index, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)):
            if any(marker in block for marker in COMPLETE):
                found[f"{page.stem.replace('-', '_').lower()}_{index}"] = block
    return found


def test_the_docs_show_a_client_an_agent_and_a_subscriber() -> None:
    assert {"client", "agent_sdk", "events"} <= {name.rsplit("_", 1)[0] for name in programs()}


def test_every_complete_program_in_the_docs_type_checks(tmp_path: Path) -> None:
    files = []
    for name, code in programs().items():
        path = tmp_path / f"{name}.py"
        path.write_text(code)
        files.append(str(path))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"), *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
