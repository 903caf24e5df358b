"""Every relative link in the README and docs/ resolves: the file exists and, where the link names a section of a
Markdown page, that page has a heading with that anchor (GitHub's rule: lower case, punctuation dropped, spaces to
hyphens). Pages are rendered from data, so a renamed heading or page would otherwise leave a dead link silently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose(text: str) -> str:
    """The text without fenced code blocks (a command's brackets are no link)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def anchors(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#+ (.*)$", prose(page.read_text()), flags=re.M)}


def test_slug_follows_githubs_rule():
    assert slug("How much of the fall is position?") == "how-much-of-the-fall-is-position"
    assert slug("What the canvas changes besides `position`") == "what-the-canvas-changes-besides-position"
    assert slug("Reruns of recorded runs") in anchors(ROOT / "docs" / "summary.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_section(page: Path):
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path) if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such section)")
    assert not broken, f"{page.name}: {', '.join(broken)}"
