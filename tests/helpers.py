"""Helpers shared by several test files (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TRAIN = (8, 8)  # the tiny models' training grid (32 px / patch 4)


def with_grads(m, img=(32, 32)):
    """One training-mode backward so learned parameters have gradients."""
    m.train()
    m(torch.randn(2, 3, *img)).square().mean().backward()
    return m


def run_notebook(name: str, monkeypatch, timeout: int = 180, **env: str) -> str:
    """Execute notebooks/NAME with ``env`` set (it must be stored without outputs); return its text output."""
    import nbclient
    import nbformat

    for k, v in {"MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}.items():
        monkeypatch.setenv(k, v)
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "store the notebook without outputs"
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    return "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/markdown", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
