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


def bias_at(bias: torch.Tensor, w: int, y: int, x: int, dy: int, dx: int) -> torch.Tensor:
    """(heads,) entries of a (heads, N, N) bias on a grid ``w`` wide: query (y, x), key (y + dy, x + dx)."""
    return bias[:, y * w + x, (y + dy) * w + x + dx]


def assert_bias_is_the_formula(pos, grid, by_hand, tol: dict, pairs: int = 40) -> None:
    """Every block's bias on ``grid`` at ``pairs`` random query-key pairs equals ``by_hand(pos, block, grid, q, k)``
    (a list per head, computed in plain Python) within ``tol``."""
    with torch.no_grad():
        bias = [a.bias for a in pos.attn_pos(grid)]
    g = torch.Generator().manual_seed(0)
    n = grid[0] * grid[1]
    for block in range(pos.depth):
        for q, k in torch.randint(0, n, (pairs, 2), generator=g).tolist():
            expected = torch.tensor(by_hand(pos, block, grid, q, k), dtype=torch.float64)
            torch.testing.assert_close(bias[block][:, q, k].double(), expected, **tol)


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


# -- the pages of the benchmarks' records ------------------------------------------------------------------------
def record(**fields) -> dict:
    """A benchmark's JSON record as common.write_record writes it, around ``fields``."""
    machine = {"date": "2026-01-02", "cpu": "a test CPU", "cores": 2, "torch": "2.0"}
    return {"command": "python benchmarks/x.py --flag", "machine": machine, "load_average": [0.5, 0.4, 0.3], **fields}


def tables(page: str) -> list[list[list[str]]]:
    """Every markdown table on ``page``: its rows (the header first) as cells."""
    found, current = [], None
    for line in page.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current = (current or []) + [[c.strip() for c in line.strip("|").split("|")]]
        elif current is not None:
            found.append(current)
            current = None
    return found


def rows(page: str) -> list[list[str]]:
    """The rows of every table on ``page``, headers included, in order."""
    return [row for t in tables(page) for row in t]


def untrained_checkpoint(path: Path, pos: str = "rope2d", images: int = 24) -> Path:
    """A checkpoint in the layout training writes (config + weights, current format) of an untrained tiny model whose
    data set is `shapes` with ``images`` validation and test images: for code that reads checkpoints, not weights."""
    from vitpos.checkpoint import FORMAT
    from vitpos.config import Config, model_from_config

    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads, cfg.model.num_classes = (
        pos, 32, 2, 2, 8)  # fmt: skip
    cfg.data.val_size = cfg.data.test_size = images
    state = {f"model.{k}": v for k, v in model_from_config(cfg).state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": {"config": cfg.to_dict()}, "vitpos_format": FORMAT}, path)
    return path


def fake_sweeps(monkeypatch, sweep, images: int = 2000) -> None:
    """benchmarks.study's checkpoint sweep replaced by ``sweep`` and every split holding ``images`` images: a
    measurement over a study's checkpoints run without a model."""
    from benchmarks import study

    monkeypatch.setattr(study, "sweep_checkpoint", sweep)
    monkeypatch.setattr(study, "checkpoint_split_size", lambda ckpt, split: images)
