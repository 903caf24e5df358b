"""The two transfer regimes (zoom, canvas) and the evaluation controls (scene pooling, log-n logit scaling): the
canvas shows the trained view unchanged inside a larger image, the window lands where it says, and each control does
exactly what it names."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import untrained_checkpoint
from PIL import Image

from vitpos import POS_SCHEMES
from vitpos import evaluate as ev
from vitpos.config import ConfigError, DataConfig
from vitpos.data.shapes import render_shapes
from vitpos.data.transforms import eval_transform
from vitpos.regime import Canvas, Window, full_window

PATCH = 4


def test_zoom_renders_exactly_as_the_whole_image_window():
    plain, _ = render_shapes(8, 32, 32, seed=3)
    whole, _ = render_shapes(8, 32, 32, seed=3, window=full_window((32, 32)))
    assert torch.equal(plain, whole)


@pytest.mark.parametrize("size, canvas", [(64, Canvas()), (48, Canvas("corner")), (64, Canvas("centre", 4)),
                                          ((40, 72), Canvas())])  # fmt: skip
def test_canvas_shows_the_trained_view_unchanged_inside_its_own_background(size, canvas):
    hw = (size, size) if isinstance(size, int) else size
    win = canvas.window(hw, (32, 32), PATCH)
    trained, _ = render_shapes(8, 32, 32, seed=5, noise=0)
    big, labels = render_shapes(8, *hw, seed=5, noise=0, window=win)
    inside = big[..., win.top : win.top + 32, win.left : win.left + 32]
    assert torch.allclose(inside, trained, atol=1e-4)  # same objects, same pixels
    outside = big.clone()
    outside[..., win.top : win.top + 32, win.left : win.left + 32] = float("nan")
    corner = trained[..., :1, :1]  # the background colour (no object touches the border)
    rest = outside.isfinite()
    assert torch.allclose(outside[rest], corner.expand_as(outside)[rest])
    assert torch.equal(labels, torch.arange(8) % 8)


def test_canvas_window_is_on_the_patch_grid_unless_shifted_and_refuses_what_does_not_fit():
    assert Canvas().window((64, 64), (32, 32), PATCH) == Window(16, 16, 32, 32)
    assert Canvas().window((44, 60), (32, 32), PATCH) == Window(4, 12, 32, 32)  # (12 // 2) rounded down to 4
    assert Canvas("corner").window((64, 64), (32, 32), PATCH) == Window(0, 0, 32, 32)
    assert Canvas("centre", 2).window((64, 64), (32, 32), PATCH) == Window(18, 18, 32, 32)
    with pytest.raises(ValueError, match="does not fit"):
        Canvas().window((24, 24), (32, 32), PATCH)
    with pytest.raises(ValueError, match="does not fit"):
        Canvas("corner", 4).window((32, 32), (32, 32), PATCH)
    with pytest.raises(ValueError, match="place"):
        Canvas("middle")


def test_window_token_mask_marks_the_scene_patches():
    mask = Window(16, 16, 32, 32).token_mask((64, 64), PATCH)
    assert mask.shape == (16, 16) and int(mask.sum()) == 64
    assert mask[4:12, 4:12].all() and not mask[:4].any() and not mask[:, 12:].any()
    shifted = Window(18, 18, 32, 32).token_mask((64, 64), PATCH)  # centres at 2 + 4k: 8 rows still inside
    assert int(shifted.sum()) == 64 and shifted[4:12, 4:12].all()


def test_real_images_on_a_canvas_are_the_trained_view_padded_with_black():
    cfg = DataConfig(eval_resize="full")
    img = Image.fromarray((torch.rand(28, 28, 3) * 255).to(torch.uint8).numpy())
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    trained = eval_transform(32, cfg, mean, std)(img)
    win = Canvas().window((64, 48), (32, 32), PATCH)
    big = eval_transform((64, 48), cfg, mean, std, win)(img)
    assert big.shape == (3, 64, 48)
    assert torch.equal(big[:, win.top : win.top + 32, win.left : win.left + 32], trained)
    black = (0 - torch.tensor(mean)) / torch.tensor(std)
    assert torch.allclose(big[:, 0, 0], black) and torch.allclose(big[:, -1, -1], black)


@pytest.mark.parametrize("pos", POS_SCHEMES)
def test_every_scheme_takes_the_controls_and_they_are_neutral_at_their_identity(tiny, pos):
    model = tiny(pos).eval()
    x = torch.randn(2, 3, 48, 32)
    with torch.no_grad():
        plain = model(x)
        assert torch.equal(model(x, pool_mask=torch.ones(12, 8, dtype=torch.bool), logit_scale=1.0), plain)
        half = torch.zeros(12, 8, dtype=torch.bool)
        half[:6] = True
        features = model.forward_features(x)[:, model.num_prefix_tokens :]
        expected = model.head(model.fc_norm(features[:, half.flatten()].mean(1)))
        assert torch.allclose(model(x, pool_mask=half), expected, atol=1e-6)
        assert not torch.allclose(model(x, pool_mask=half), plain)


def test_logn_scale_is_the_ratio_of_log_token_counts():
    from vitpos.evaluate.sweep import logn_scale

    assert logn_scale((16, 16), (8, 8)) == pytest.approx(math.log(256) / math.log(64))
    assert logn_scale((8, 8), (8, 8)) == 1.0


def test_logit_scale_changes_outputs_for_a_scheme_with_attention(tiny):
    model = tiny("rope2d").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert not torch.allclose(model(x, logit_scale=1.5), model(x))


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return untrained_checkpoint(tmp_path_factory.mktemp("regime") / "last.ckpt")


def test_sweep_measures_both_regimes_and_records_them(tiny_ckpt):
    data = ev.EvalData(regimes=("zoom", "canvas"), limit=8)
    recs = ev.sweep([tiny_ckpt], [24, 32, 64], methods=["extrapolate"], data=data)
    cells = {(r["regime"], r["resolution"]) for r in recs}
    assert cells == {("zoom", 24), ("zoom", 32), ("zoom", 64), ("canvas", 64)}  # canvas: above the training size
    canvas64 = next(r for r in recs if (r["regime"], r["resolution"]) == ("canvas", 64))
    assert canvas64["window"] == [16, 16, 32, 32] and canvas64["pool"] == "all" and canvas64["samples"] == 8
    assert all(r["window"] is None for r in recs if r["regime"] == "zoom")


def test_sweep_records_the_controls_it_applied(tiny_ckpt):
    base = ev.sweep([tiny_ckpt], [64], methods=["extrapolate"], data=ev.EvalData(regimes=("canvas",), limit=16))
    scene = ev.sweep([tiny_ckpt], [64], methods=["extrapolate"],
                     data=ev.EvalData(regimes=("canvas",), limit=16, pool="scene", logit_scaling="logn"))  # fmt: skip
    assert (scene[0]["pool"], scene[0]["logit_scaling"]) == ("scene", "logn")
    assert (base[0]["pool"], base[0]["logit_scaling"]) == ("all", "none")


@pytest.mark.parametrize("data, match", [(dict(regimes=("bogus",)), "unknown regime"),
                                         (dict(pool="tokens"), "unknown pool"),
                                         (dict(logit_scaling="log"), "unknown logit scaling"),
                                         (dict(regimes=()), "no regime")])  # fmt: skip
def test_sweep_refuses_unknown_controls_in_one_line(tiny_ckpt, data, match):
    with pytest.raises(ConfigError, match=match):
        ev.sweep([tiny_ckpt], [32], data=ev.EvalData(**data))
