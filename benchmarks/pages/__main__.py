"""python -m benchmarks.pages: every page whose JSON is in docs/, and the README's summary table."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.pages import protocol, summary
from benchmarks.pages.common import DOCS, read

README = DOCS.parent / "README.md"
START, END = "<!-- summary table: python -m benchmarks.pages -->", "<!-- end of summary table -->"


def readme_with(block: str, text: str) -> str:
    """The README's text with the block between the markers replaced (the markers must be there, once each)."""
    if text.count(START) != 1 or text.count(END) != 1:
        raise SystemExit(f"README.md needs the markers {START} and {END} once each")
    before, rest = text.split(START)
    _, after = rest.split(END)
    return f"{before}{START}\n{block}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv if argv is not None else sys.argv[1:])[0]) if (argv or sys.argv[1:]) else DOCS
    study = read(folder / "study.json")
    proto = read(folder / "protocol.json")
    if proto is not None:
        (folder / "protocol.md").write_text(protocol.render(proto, study))
        print(f"wrote {folder / 'protocol.md'}")
    if study is not None:
        page, block = summary.render(study, folder, read(folder / "results.json"))
        (folder / "summary.md").write_text(page)
        print(f"wrote {folder / 'summary.md'}")
        if folder == DOCS:
            README.write_text(readme_with(block, README.read_text()))
            print(f"wrote {README}'s summary table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
