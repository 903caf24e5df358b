"""docs/benchmarks.md, the catalogue of pages: written from the records, every record named, each record's command."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import ROOT, record

from benchmarks.pages import catalogue

DOCS = ROOT / "docs"


def test_committed_catalogue_is_the_rendered_one():
    assert (DOCS / "benchmarks.md").read_text() == catalogue.render(DOCS)


def test_every_record_in_docs_has_a_row_and_every_row_a_record_or_its_command():
    cat = catalogue.catalogue()
    named = [n for entry in cat["pages"] for n in entry["records"]]
    on_disk = {p.stem for p in DOCS.glob("*.json")}
    assert on_disk <= set(named), f"records without a row: {sorted(on_disk - set(named))}"
    assert len(named) == len(set(named))  # a record belongs to one page
    missing = set(named) - on_disk
    assert missing == set(cat["planned"])  # a measured record drops its planned command; a missing one has one
    assert all((DOCS / f"{e['page']}.md").is_file() or set(e["records"]) & missing for e in cat["pages"])


def test_page_names_each_records_own_command_and_the_planned_ones(tmp_path):
    for src in DOCS.glob("*.json"):
        shutil.copy(src, tmp_path)
    (tmp_path / "cost.json").write_text(json.dumps(record(rows=[]) | {"command": "python -m benchmarks.cost --x 7"}))
    page = catalogue.render(tmp_path)
    assert "```\npython -m benchmarks.cost --x 7\n```" in page
    assert "### docs/cost.json\n\nWritten 2026-01-02 by:" in page
    for name, command in catalogue.catalogue()["planned"].items():
        assert f"### docs/{name}.json\n\nNot yet measured; measured by:\n\n```\n{command}\n```" in page
        assert f"docs/{name}.json (to come)" in page
    assert "[docs/study.json](#docsstudyjson)" in page and "### docs/study.json" in page  # the link finds its heading


def test_a_rerun_record_names_every_command_its_rows_came_from_once_in_order():
    rows = [{"command": "b"}, {"command": "a"}, {"command": "b"}, {}]
    assert catalogue.commands(record(reruns=rows)) == ["b", "a"]
    assert catalogue.commands(record(reruns=[])) == ["python benchmarks/x.py --flag"]


def test_a_missing_record_without_a_planned_command_stops_the_page(tmp_path):
    for src in DOCS.glob("*.json"):
        shutil.copy(src, tmp_path)
    (tmp_path / "export.json").unlink()
    with pytest.raises(SystemExit, match=r"docs/export.json is missing and catalogue.yaml names no command"):
        catalogue.render(tmp_path)
