"""`pape`: PaPE's sum of parabolas of the offset as a logit bias (vitpos/pos/pape.py states the formula).

* the bias is the formula, pinned pair by pair against a plain-Python sum over the parabolas;
* it depends only on the offset (key minus query): equal for equal offsets anywhere on grids of any size and shape,
  different for different offsets; a shift of every coordinate (``--pos-aug shift``) changes nothing, a rescale does;
* every parabola opens downwards: bias(d) + bias(-d) <= 0 = bias(0), even where a curvature parameter is negative;
* the bias is finite at 16x the training grid, the parameter count does not depend on the grid, and a non-square grid
  never trained on is served with the trained offsets' values;
* it is fp32 under autocast, and a class token's rows and columns are the learned prefix bias.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_bias_is_the_formula, bias_at  # noqa: E402

import vitpos

pytestmark = pytest.mark.usefixtures("one_thread")

FP32 = dict(rtol=1e-5, atol=1e-4)  # fp32 sums of a few dozen terms of size up to ~1e2 against an fp64 copy
SAME_OFFSET = dict(rtol=1e-6, atol=1e-5)  # one fp32 bias reached at two places (products summed in any order)
DISTINCT = 1e-3  # two different offsets' biases differ by at least this
TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def pape(img_size=32, parabolas=7, **kw) -> vitpos.ViT:
    torch.manual_seed(0)
    pos_kwargs = {"pape_parabolas": parabolas, **kw.pop("pos_kwargs", {})}
    return vitpos.create_model("pape", **{**TINY, "img_size": img_size, "pos_kwargs": pos_kwargs, **kw}).eval()


def bias_by_hand(pos, block: int, grid, q: int, k: int) -> list[float]:
    """PaPE's bias per head of query q and key k (row-major indices) of ``grid``, in plain Python."""
    h, w = grid
    dy, dx = k // w - q // w, k % w - q % w
    if pos.method == "scaled":
        dy, dx = dy * pos.train_grid[0] / h, dx * pos.train_grid[1] / w
    direction, curvature, slope = (t[block].tolist() for t in (pos.direction, pos.curvature, pos.slope))
    out = []
    for head in range(pos.num_heads):
        total = 0.0
        for m in range(len(slope[head])):
            wy, wx = direction[head][m]
            a = math.log1p(math.exp(curvature[head][m]))
            b = slope[head][m]
            u = wy * dy + wx * dx
            total += a * u * u + b * u
        out.append(-total / math.sqrt(pos.head_dim))
    return out


@pytest.mark.parametrize("method", ["extrapolate", "scaled"])
def test_pape_bias_is_the_formula(method):
    m = pape()
    m.pos.method = method
    # non-square, wider than trained: ``scaled`` squeezes x and stretches y
    assert_bias_is_the_formula(m.pos, (6, 13), bias_by_hand, FP32)


def test_pape_bias_depends_only_on_the_offset():
    m = pape()
    m.pos.method = "extrapolate"  # integer offsets on every grid
    with torch.no_grad():
        small, big = m.pos.attn_pos((8, 8))[1].bias, m.pos.attn_pos((20, 30))[1].bias
    for dy, dx in [(-2, -3), (1, 2), (0, 5), (-4, 0)]:
        ref = bias_at(small, 8, 4, 3, dy, dx) if dx < 5 else bias_at(small, 8, 4, 0, dy, dx)
        for y, x in [(5, 6), (12, 20), (15, 3)]:  # anywhere on a larger grid
            torch.testing.assert_close(bias_at(big, 30, y, x, dy, dx), ref, **SAME_OFFSET)
    # a different offset is a different bias (per head), and the sign of the offset matters (the linear term)
    assert (bias_at(small, 8, 4, 3, 1, 2) - bias_at(small, 8, 4, 3, 2, 1)).abs().min() > DISTINCT
    assert (bias_at(small, 8, 4, 3, 1, 2) - bias_at(small, 8, 4, 3, -1, -2)).abs().min() > DISTINCT


def test_pape_shift_changes_nothing_and_rescale_does():
    """The coordinates come from the seam: a shift of all of them leaves every offset (so the bias) as it is."""
    plain = pape().pos.bias((8, 8))
    with torch.no_grad():
        shifted = pape(pos_aug="shift=0.5").pos.train().bias((8, 8))
        rescaled = pape(pos_aug="rescale=2").pos.train().bias((8, 8))
    torch.testing.assert_close(shifted, plain.detach(), **SAME_OFFSET)
    assert (rescaled - plain).abs().max() > DISTINCT


def test_pape_parabolas_open_downwards():
    """softplus keeps every a_m >= 0: the bias is a concave quadratic of the offset, 0 at the query itself."""
    m = pape()
    with torch.no_grad():
        m.pos.curvature.copy_(torch.linspace(-4.0, 2.0, m.pos.curvature.numel()).view_as(m.pos.curvature))
        m.pos.slope.mul_(3)  # vertices off the query
        bias = torch.stack([a.bias for a in m.pos.attn_pos((7, 9))])  # (depth, heads, N, N)
    assert torch.equal(bias.diagonal(dim1=-2, dim2=-1), torch.zeros(2, 4, 63))
    # bias(d) + bias(-d) <= 0 for every offset d, from the one query whose mirrored keys are all on the grid
    w, y, x = 9, 3, 4  # the centre: every offset up to (3, 4) has its mirror on the grid
    for dy in range(-3, 4):
        for dx in range(-4, 5):
            pair = bias[..., y * w + x, (y + dy) * w + x + dx] + bias[..., y * w + x, (y - dy) * w + x - dx]
            assert (pair <= FP32["atol"]).all(), (dy, dx, pair.max())


def test_pape_serves_16x_the_training_grid_with_a_fixed_parameter_count():
    small = pape(img_size=8, depth=1, parabolas=50)  # a 2x2 training grid
    small.pos.method = "extrapolate"  # integer offsets: the parabolas at offsets never trained on
    count = sum(p.numel() for p in small.pos.parameters())
    assert count == sum(p.numel() for p in pape(img_size=128, depth=1, parabolas=50).pos.parameters())
    with torch.no_grad():
        trained = small.pos.attn_pos((2, 2))[0].bias
        bias = small.pos.attn_pos((32, 32))[0].bias
    assert torch.isfinite(bias).all() and bias.shape == (4, 1024, 1024)
    torch.testing.assert_close(bias_at(bias, 32, 20, 7, 1, -1), bias_at(trained, 2, 0, 1, 1, -1), **SAME_OFFSET)
    assert bias.min() < 20 * trained.min()  # the parabolas keep falling at offsets of 31 patches


def test_pape_serves_a_non_square_unseen_grid_with_the_trained_offsets():
    m = pape()  # trained on 8x8
    m.pos.method = "extrapolate"  # integer offsets: a trained offset keeps its value
    with torch.no_grad():
        trained = m.pos.attn_pos((8, 8))[0].bias
        served = {grid: m.pos.attn_pos(grid)[0].bias for grid in [(5, 11), (11, 5)]}  # one model, both shapes
    for (h, w), bias in served.items():
        assert bias.shape == (4, h * w, h * w) and torch.isfinite(bias).all()
        checked = 0
        for q in range(h * w):
            for k in range(h * w):
                dy, dx = k // w - q // w, k % w - q % w
                if abs(dy) < 8 and abs(dx) < 8:  # an offset the training grid has: its trained value
                    y0, x0 = max(0, -dy), max(0, -dx)
                    torch.testing.assert_close(bias[:, q, k], bias_at(trained, 8, y0, x0, dy, dx), **SAME_OFFSET)
                    checked += 1
        assert checked > h * w * 5


def test_pape_serves_a_larger_grid_by_default_with_the_offsets_scaled_onto_the_trained_span():
    """The default (``scaled``, chosen on validation): on a grid k times the training one, the offset (k dy, k dx)
    gets the bias the training grid gives (dy, dx), so the whole image spans the offsets seen in training."""
    m = pape()  # trained on 8x8
    assert m.pos.method == "scaled"
    with torch.no_grad():
        trained, big = m.pos.attn_pos((8, 8))[0].bias, m.pos.attn_pos((16, 24))[0].bias  # 2x rows, 3x columns
    for dy, dx in [(1, 2), (-2, 1), (3, -2)]:
        torch.testing.assert_close(bias_at(big, 24, 6, 9, 2 * dy, 3 * dx), bias_at(trained, 8, 3, 3, dy, dx),
                                   **SAME_OFFSET)  # fmt: skip


def test_pape_bias_is_fp32_under_autocast():
    m = pape()
    with torch.no_grad():
        plain = m.pos.bias((6, 10))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cast = m.pos.bias((6, 10))
    assert cast.dtype == torch.float32 and torch.equal(cast, plain)


def test_pape_class_token_rows_and_columns_are_the_prefix_bias():
    m = pape(class_token=True, global_pool="token")
    with torch.no_grad():
        m.pos.prefix_bias.copy_(torch.randn_like(m.pos.prefix_bias))
        bias = m.pos.attn_pos((8, 8))[1].bias
    to_patch, from_patch, to_prefix = m.pos.prefix_bias[1].unbind(-1)  # (heads,) each
    assert bias.shape == (4, 65, 65)
    assert torch.equal(bias[:, 0, 1:], to_patch[:, None].expand(4, 64))
    assert torch.equal(bias[:, 1:, 0], from_patch[:, None].expand(4, 64))
    assert torch.equal(bias[:, 0, 0], to_prefix)
    assert torch.equal(pape(class_token=True).pos.prefix_bias, torch.zeros(2, 4, 3))  # a patch's own bias at init


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_pape_parabolas(bad):
    with pytest.raises(ValueError, match="pape_parabolas must be a positive integer"):
        pape(parabolas=bad)
