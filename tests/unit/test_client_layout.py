"""The client package stays in modules a reader takes in at once (issue 25): none over 500 lines."""

from __future__ import annotations

from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "libs" / "client" / "src" / "vmsched_client"
MOST_LINES = 500


def test_no_module_of_the_client_is_over_500_lines() -> None:
    lines = {path.relative_to(CLIENT): len(path.read_text().splitlines()) for path in CLIENT.rglob("*.py")}
    assert len(lines) > 10
    assert {path: count for path, count in lines.items() if count > MOST_LINES} == {}
