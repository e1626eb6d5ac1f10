"""Write the parts of docs/ that are made from the code: the lifecycle table of docs/lifecycle.md.
``make docs`` runs it; tests/unit/test_lifecycle.py fails when the committed page differs."""

from __future__ import annotations

import sys
from pathlib import Path

from vmsched_domain.lifecycle import markdown_table

ROOT = Path(__file__).resolve().parent.parent
LIFECYCLE = ROOT / "docs" / "lifecycle.md"
BEGIN = "<!-- transitions: made by `make docs` from vmsched_domain.lifecycle -->"
END = "<!-- end of transitions -->"


def with_table(page: str) -> str:
    """``page`` with the text between the markers replaced by the table of the code."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{markdown_table()}\n{END}{tail}"


def main() -> int:
    page = LIFECYCLE.read_text()
    if BEGIN not in page or END not in page:
        print(f"{LIFECYCLE}: the markers of the transitions table are missing", file=sys.stderr)
        return 1
    LIFECYCLE.write_text(with_table(page))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
