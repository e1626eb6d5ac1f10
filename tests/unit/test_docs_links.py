"""Every page the README links exists, and so does every heading a link names (``page.md#heading``),
so that a newcomer who follows the README's "Read on" finds each page where it says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *$", flags=re.MULTILINE)
_FENCED = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(heading) for heading in _HEADING.findall(_FENCED.sub("", page.read_text()))}


def local_links(page: Path) -> list[tuple[Path, str]]:
    """The page's links to files of the repository: (file, anchor or "")."""
    found = []
    for target in _LINK.findall(_FENCED.sub("", page.read_text())):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        found.append(((page.parent / path).resolve() if path else page, fragment))
    return found


def test_the_anchor_of_a_heading_is_githubs() -> None:
    assert anchor("`least_utilized`: measured load") == "least_utilized-measured-load"
    assert anchor("Priority and preemption") == "priority-and-preemption"
    assert anchor("Moving a VM") == "moving-a-vm"


def test_every_page_the_readme_links_exists_with_the_heading_it_names() -> None:
    links = local_links(README)
    assert any(path.parent == ROOT / "docs" for path, _ in links), "the README links its docs"
    for path, fragment in links:
        assert path.exists(), f"README.md links {path.relative_to(ROOT)}, which does not exist"
        if fragment:
            assert fragment in anchors(path), f"README.md links {path.relative_to(ROOT)}#{fragment}: no such heading"


def test_every_link_between_the_docs_pages_lands() -> None:
    broken = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for path, fragment in local_links(page):
            if not path.exists():
                broken.append(f"{page.name}: {path} does not exist")
            elif fragment and path.suffix == ".md" and fragment not in anchors(path):
                broken.append(f"{page.name}: {path.name}#{fragment}: no such heading")
    assert not broken, "\n".join(broken)
