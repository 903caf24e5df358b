"""docs/benchmarks.md: every page, the records it is rendered from and the command each record names, from
catalogue.yaml (the page list and what each page shows) and the records in docs/."""

from __future__ import annotations

from pathlib import Path

import yaml

from benchmarks.pages.common import HERE, fill, read, table

CATALOGUE = HERE / "catalogue.yaml"


def catalogue() -> dict:
    """catalogue.yaml: ``pages`` (page, records, what) and ``planned`` (the command of each record not yet measured)."""
    return yaml.safe_load(CATALOGUE.read_text())


def commands(record: dict) -> list[str]:
    """The commands a record names: its own, and for a rerun record every distinct command its rows were trained by
    (a record gathers rows from several commands), in order of first use."""
    named = [r["command"] for r in record.get("reruns", []) if r.get("command")] or [record["command"]]
    return list(dict.fromkeys(named))


def page_cell(page: str, folder: Path) -> str:
    """A link to the page where it has been written, else its name."""
    return f"[docs/{page}.md]({page}.md)" if (folder / f"{page}.md").is_file() else f"docs/{page}.md (not yet written)"


def command_block(name: str, record: dict | None, planned: dict[str, str]) -> str:
    """One record's heading and its commands, or the command that will measure it."""
    if record is None:
        if name not in planned:
            raise SystemExit(f"docs/{name}.json is missing and catalogue.yaml names no command for it")
        return f"### docs/{name}.json\n\nNot yet measured; measured by:\n\n```\n{planned[name]}\n```"
    date = record.get("machine", {}).get("date", "?")
    code = "\n".join(commands(record))
    return f"### docs/{name}.json\n\nWritten {date} by:\n\n```\n{code}\n```"


def render(folder: Path) -> str:
    """The page from the catalogue and the records in ``folder``."""
    cat = catalogue()
    rows, blocks = [], []
    for entry in cat["pages"]:
        names = entry["records"]
        made = [f"[docs/{n}.json](#docs{n}json)" if (folder / f"{n}.json").is_file() else f"docs/{n}.json (to come)"
                for n in names]  # fmt: skip
        rows.append([page_cell(entry["page"], folder), "<br>".join(made), entry["what"]])
        blocks += [command_block(n, read(folder / f"{n}.json"), cat["planned"]) for n in names]
    return fill("catalogue.md", table=table(["page", "records", "what"], rows), commands="\n\n".join(blocks))
