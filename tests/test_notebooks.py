"""The notebooks are stored with their outputs, made by `make notebooks` from the results in docs/: executing
them again the same way gives the same text, so the stored outputs are current."""

from __future__ import annotations

import re

import nbformat
import pytest
from helpers import ROOT, notebook_runner

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def test_make_notebooks_runs_the_executor():
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^notebooks:.*\n\t(.+)$", make, re.M)
    assert recipe and recipe.group(1).strip() == "$(PY) notebooks/execute.py"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_outputs_are_what_the_notebook_makes_from_docs(name):
    runner = notebook_runner()
    stored = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))  # run top to bottom, in one go
    assert all(c.outputs for c in code), "every code cell shows something"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs)  # the figures are stored too
    fresh = runner.execute(ROOT / "notebooks" / name)  # as `make notebooks` does (inline figures)
    assert runner.text_outputs(fresh) == runner.text_outputs(stored)
