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


def notebook_runner():
    """notebooks/execute.py as a module: the code `make notebooks` runs, used here the same way."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebooks_execute", ROOT / "notebooks" / "execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_notebook(name: str, monkeypatch=None, timeout: int = 180, **env: str) -> str:
    """Execute notebooks/NAME from a clean state with ``env`` set (the stored file is not changed); its text output."""
    runner = notebook_runner()
    nb = runner.execute(ROOT / "notebooks" / name, timeout=timeout, MPLBACKEND="Agg", **env)
    return "".join(runner.text_outputs(nb))
