"""Diagnostics (python -m vitpos.diagnose): pictures per hook, recomputed attention, the patch-shuffle test,
the CLI and the position-anatomy notebook. One tiny `learned` checkpoint serves the module; other
schemes are built in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from einops import rearrange
from helpers import run_notebook
from torch.utils.data import DataLoader, TensorDataset

import vitpos
from vitpos import diagnose as dg
from vitpos.config import Config, model_from_config

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--embed-dim", "32", "--depth", "1", "--num-heads", "2", "--batch-size", "16", "--train-size", "64",
        "--val-size", "32", "--test-size", "32", "--epochs", "1"]  # fmt: skip
FUSED = dict(atol=1e-5, rtol=1e-4)  # the fused attention kernel against the written-out softmax: fp32 rounding
SAME_LOGITS = dict(atol=1e-5, rtol=1e-5)  # one fp32 model's logits on two inputs it cannot tell apart
SLACK = 1e-5  # fp32 rounding of a distance against its bound


@pytest.fixture(autouse=True)
def _headless_one_thread(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    from vitpos.rundir import OUT_ENV
    from vitpos.training import main

    out = tmp_path_factory.mktemp("diagnose") / "run"
    saved = os.environ.pop(OUT_ENV, None)
    torch.set_num_threads(1)
    try:
        assert main([*TINY, "--pos", "learned", "--out", str(out)]) == 0
    finally:
        os.environ.pop(OUT_ENV, None)
        if saved is not None:
            os.environ[OUT_ENV] = saved
    return out / "checkpoints" / "last.ckpt"


def _model(pos: str, **model) -> vitpos.ViT:
    torch.manual_seed(0)
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = pos, 32, 2, 2
    for k, v in model.items():
        setattr(cfg.model, k, v)
    return model_from_config(cfg).eval()


def _uses(pos: str) -> dict[str, bool]:
    parts = pos.split("+")
    return {"tokens": any(p in ("learned", "sincos2d") for p in parts),
            "bias": any(p in ("relbias", "cpb", "alibi2d", "lookhere", "fire", "pape") for p in parts),
            "rope": any(p.startswith("rope") or p in ("liere", "string") for p in parts)}  # fmt: skip


def _loader(n: int = 8, size: int = 32, classes: int = 10) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(n, 3, size, size, generator=g)
    return DataLoader(TensorDataset(images, torch.randint(classes, (n,), generator=g)), batch_size=4)


# -- pictures per hook ----------------------------------------------------------------------------
@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_each_picture_is_drawn_exactly_for_the_schemes_using_its_hook(pos, tmp_path):
    model, uses = _model(pos), _uses(pos)
    drawn = {
        "tokens": dg.plot_position_similarity(model, tmp_path / "sim.png"),
        "bias": dg.plot_bias(model, tmp_path / "bias.png"),
        "rope": dg.plot_rope_kernel(model, tmp_path / "rope.png"),
    }
    for hook, path in drawn.items():
        assert (path is not None) == uses[hook], hook
        if path is not None:
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dist = dg.mean_attention_distance(model, _loader())
    assert dist.shape == (2, 2)
    assert (dist >= 0).all() and (dist <= dg.max_grid_distance(model.grid) + SLACK).all()
    assert dg.plot_attention_distance(dist, tmp_path / "d.png", 9.9).is_file()


def test_rope_kernel_depends_only_on_the_offset():
    model = _model("rope2d")
    model.pos.method = "extrapolate"  # integer positions on every grid: the same offset, the same kernel
    big = dg.rope_kernel(model, (9, 9))  # centre (4, 4): offsets -4..4
    small = dg.rope_kernel(model, (5, 5))  # centre (2, 2): offsets -2..2
    torch.testing.assert_close(big[:, 2:7, 2:7], small)
    assert torch.allclose(big.amax(dim=(-2, -1)), big[:, 4, 4])  # q = k: peak at offset 0


def test_bias_map_is_the_centre_row_of_the_scheme_bias():
    model = _model("relbias", class_token=True)
    bias = model.pos.attn_pos(model.grid)[1].bias  # (heads, 1 + N, 1 + N)
    q = dg.centre_index(model.grid)
    want = rearrange(bias[:, 1 + q, 1:], "hd (h w) -> hd h w", h=model.grid[0])
    torch.testing.assert_close(dg.centre_bias(model)[1], want)


@pytest.mark.parametrize(
    "pos,qkv_bias",
    [("learned", "qkv"), ("rope2d", "qkv"), ("rope2d-mixed", "qkv"), ("relbias", "qkv"), ("cpb", "qkv"),
     ("rope2d+peg", "qkv"), ("rope2d", "qv"), ("relbias", "qv")],
)  # fmt: skip
def test_recomputed_attention_reproduces_each_block(pos, qkv_bias):
    model = _model(pos, class_token=True, qkv_bias=qkv_bias)
    with torch.no_grad():  # q and v biases away from their zero init, so that a path that skips them shows
        for name, p in model.named_parameters():
            if name.endswith(("q_bias", "v_bias")):
                p.normal_(0, 1)
    outputs = []
    hooks = [b.attn.register_forward_hook(lambda m, args, out: outputs.append((m, args, out))) for b in model.blocks]
    images = next(iter(_loader()))[0]
    with torch.no_grad():
        model(images)
        for h in hooks:
            h.remove()
        for m, (x, pos_), out in outputs:
            a = dg.recompute_attention(m, x, pos_)
            v = m.heads_qkv(x, pos_)[2]
            # fused kernel against the written-out softmax: fp32 rounding only
            torch.testing.assert_close(m.proj(rearrange(a @ v, "b h n d -> b n (h d)")), out, **FUSED)


# -- the patch-shuffle test -----------------------------------------------------------------------
def test_patch_shuffle_cannot_change_a_position_blind_model():
    model = _model("none")
    loader = _loader(16)
    result = dg.patch_shuffle_test(model, loader)
    assert result["top1"] == result["top1_shuffled"] and result["num_images"] == 16
    images = next(iter(loader))[0]
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(1))
    shuffled = dg.shuffle_patches(images, 4, perm)
    assert not torch.equal(shuffled, images)
    with torch.no_grad():
        torch.testing.assert_close(model(shuffled), model(images), **SAME_LOGITS)
    # the inverse permutation restores the images
    torch.testing.assert_close(dg.shuffle_patches(shuffled, 4, torch.argsort(perm)), images)


# -- one checkpoint, end to end -------------------------------------------------------------------
def test_cli_writes_pictures_and_summary(ckpt, tmp_path, capsys):
    out = tmp_path / "diag"
    assert dg.main(["--ckpt", str(ckpt), "--out", str(out), "--num-images", "20"]) == 0
    printed = capsys.readouterr().out
    assert "patch-shuffle top-1" in printed
    summary = json.loads((out / "diagnostics.json").read_text())
    assert summary["scheme"] == "learned" and summary["hooks"] == {"tokens": True, "bias": False, "rope": False}
    assert sorted(summary["pictures"]) == ["attention_distance.png", "position_similarity.png"]
    assert sorted(p.name for p in out.glob("*.png")) == sorted(summary["pictures"])
    assert summary["patch_shuffle"]["num_images"] == 20
    assert 0 <= summary["patch_shuffle"]["top1"] <= 1 and 0 <= summary["patch_shuffle"]["top1_shuffled"] <= 1
    dist = torch.tensor(summary["mean_attention_distance"])
    assert dist.shape == (1, 2) and (dist >= 0).all() and (dist <= summary["max_grid_distance"]).all()


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1 and "error" in lines[0], err
    return lines[0]


@pytest.mark.cli
def test_cli_bad_input_fails_in_one_line(ckpt, tmp_path, capsys):
    proc = subprocess.run(
        [sys.executable, "-m", "vitpos.diagnose", "--ckpt", str(tmp_path / "nope.ckpt"), "--out", str(tmp_path / "o")],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 2 and "checkpoint not found" in _one_line_error(proc.stderr)

    foreign = tmp_path / "foreign.ckpt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    assert dg.main(["--ckpt", str(foreign), "--out", str(tmp_path / "o")]) == 2
    assert "not a vitpos checkpoint" in _one_line_error(capsys.readouterr().err)

    assert dg.main(["--ckpt", str(ckpt), "--out", str(tmp_path / "o"), "--num-images", "0"]) == 2
    assert "--num-images" in _one_line_error(capsys.readouterr().err)

    with pytest.raises(SystemExit) as exit_:  # argparse's own errors: one line too, exit status 2
        dg.main(["--ckpt", str(ckpt), "--out", str(tmp_path / "o"), "--num-images", "x"])
    assert exit_.value.code == 2
    assert "invalid int" in _one_line_error(capsys.readouterr().err)

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert dg.main(["--ckpt", str(ckpt), "--out", str(busy)]) == 2
    assert "--overwrite" in _one_line_error(capsys.readouterr().err)
    assert dg.main(["--ckpt", str(ckpt), "--out", str(busy), "--num-images", "8", "--overwrite"]) == 0
    assert (busy / "keep.txt").read_text() == "mine" and (busy / "diagnostics.json").is_file()

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert dg.main(["--ckpt", str(ckpt), "--out", str(afile), "--overwrite"]) == 2
    assert "is a file" in _one_line_error(capsys.readouterr().err)


def test_default_out_is_the_run_folder(ckpt, capsys):
    out = ckpt.parent.parent / "diagnostics"
    assert dg.main(["--ckpt", str(ckpt), "--num-images", "8"]) == 0
    assert json.loads((out / "diagnostics.json").read_text())["scheme"] == "learned"
    assert f"to {out}" in capsys.readouterr().out


def test_text_file_as_checkpoint_is_one_line(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert dg.main(["--ckpt", str(text), "--out", str(tmp_path / "o")]) == 2
    assert "truncated or corrupt" in _one_line_error(capsys.readouterr().err)


# -- pictures that do not mislead -----------------------------------------------------------------
def _images(fig):
    return [im for ax in fig.axes for im in ax.get_images()]


def test_offset_maps_pick_the_colour_map_by_sign_and_label_their_axes():
    import matplotlib.pyplot as plt

    extent = dg._offset_extent((4, 4))
    positive = dg._heads_figure(torch.rand(1, 2, 4, 4) + 0.5, ["block 0"], "t", "v", extent)
    for im in _images(positive):  # non-negative: sequential, from 0
        assert im.get_cmap().name == "viridis" and im.get_clim()[0] == 0
    signed = dg._heads_figure(torch.rand(1, 2, 4, 4) - 0.7, ["block 0"], "t", "v", extent)
    for im in _images(signed):  # signed: diverging, symmetric about 0
        lo, hi = im.get_clim()
        assert im.get_cmap().name == "RdBu_r" and lo == -hi
    panels = [ax for ax in positive.axes if ax.get_images()]
    assert {ax.get_xlabel() for ax in panels} == {"dx (patches)"} and panels[0].get_ylabel() == "dy (patches)"
    plt.close("all")


def test_attention_distance_heads_are_distinguishable_and_the_max_line_labelled(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(dg, "_save", lambda fig, path: figures.append(fig) or Path(path))
    dg.plot_attention_distance(torch.full((3, 4), 2.0), tmp_path / "a.png", max_dist=5.0)  # all heads coincide
    (ax,) = figures[0].axes
    heads = ax.collections
    assert len(heads) == 4
    colours = {tuple(h.get_facecolor()[0]) for h in heads}
    paths = {h.get_paths()[0].vertices.tobytes() for h in heads}
    xs = {tuple(h.get_offsets()[:, 0]) for h in heads}
    assert len(colours) == len(paths) == len(xs) == 4  # colour, marker and place differ per head
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["head 0", "head 1", "head 2", "head 3", "max distance on the grid (5.00)"]
    plt.close("all")


# -- notebook -------------------------------------------------------------------------------------
def test_notebook_executes_on_a_tiny_result(ckpt, tmp_path, monkeypatch):
    out = tmp_path / "diag"
    dg.diagnose(ckpt, out, num_images=8)
    text = run_notebook("position_anatomy.ipynb", monkeypatch, VITPOS_DIAG_DIR=str(out))
    assert "learned/patch" in text and "patch-shuffle" in text
    for pos in vitpos.POS_SCHEMES:
        assert pos in text
