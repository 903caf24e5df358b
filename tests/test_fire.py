"""`fire`: FIRE's functional bias in 2D (vitpos/pos/fire.py states the formula).

* the bias is the formula, pinned pair by pair against a plain-Python copy of it;
* it depends only on the offset and on the query's place between the grid's edges (progressive interpolation):
  equal for equal (offset, reach) on grids of any size, different where only the reach differs;
* every normalised offset stays in [-1, 1] on any grid, the bias is finite at 16x the training grid, and the
  parameter count does not depend on the grid;
* the ``extrapolate`` ablation is the trained bias at the training grid and leaves [-1, 1] beyond it.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_bias_is_the_formula, bias_at  # noqa: E402

import vitpos
from vitpos.pos.fire import EPS

pytestmark = pytest.mark.usefixtures("one_thread")

FP32 = dict(rtol=1e-5, atol=1e-5)  # an fp32 MLP of unit-scale inputs
TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def fire(img_size=32, **kw) -> vitpos.ViT:
    torch.manual_seed(0)
    m = vitpos.create_model("fire", **{**TINY, "img_size": img_size, **kw}).eval()
    with torch.no_grad():  # c and L away from their start, per block
        m.pos.log_scale.copy_(torch.tensor([0.3, -0.7])[: m.pos.depth])
        m.pos.threshold.copy_(torch.tensor([1.5, -3.0])[: m.pos.depth])
    return m


def bias_by_hand(pos, block: int, grid, q: int, k: int) -> list[float]:
    """FIRE's 2D bias of query q and key k (row-major indices) of ``grid``, in plain Python from the parameters."""
    c, big_l = abs(float(pos.log_scale[block].detach())), abs(float(pos.threshold[block].detach()))
    h, w = grid
    u = []
    for a_q, a_k, n in ((q // w, k // w, h), (q % w, k % w, w)):
        d = a_k - a_q
        reach = a_q if d < 0 else n - 1 - a_q
        if pos.method == "extrapolate":
            reach = min(reach, pos.train_grid[0 if n == h else 1] - 1)
        norm = math.log(c * max(big_l, reach) + 1) + EPS
        u.append(math.copysign(1, d) * math.log(c * abs(d) + 1) / norm if d else 0.0)
    w1, b1, w2, b2 = (t[block].detach().double() for t in (pos.w1, pos.b1, pos.w2, pos.b2))
    hidden = torch.relu(torch.tensor(u, dtype=torch.float64) @ w1 + b1)
    return (hidden @ w2 + b2).tolist()


@pytest.mark.parametrize("method", ["progressive", "extrapolate"])
def test_fire_bias_is_the_formula(method):
    m = fire()
    m.pos.method = method
    # wider than trained: the cap of ``extrapolate`` binds along x
    assert_bias_is_the_formula(m.pos, (6, 13), bias_by_hand, FP32)


def test_fire_bias_depends_only_on_the_offset_and_the_querys_reach():
    m = fire()
    with torch.no_grad():
        small, big = m.pos.attn_pos((8, 8))[0].bias, m.pos.attn_pos((20, 30))[0].bias

    # same offset, same distance to the edge on the key's side (up-left: the query's own row and column)
    torch.testing.assert_close(bias_at(small, 8, 5, 6, -2, -3), bias_at(big, 30, 5, 6, -2, -3), rtol=0, atol=0)
    # down-right: the reach is to the far edges, (8 - 1 - 3, 8 - 1 - 2) = (4, 5) on both grids
    torch.testing.assert_close(bias_at(small, 8, 3, 2, 1, 2), bias_at(big, 30, 15, 24, 1, 2), rtol=0, atol=0)
    # the same offset where the query's reach differs: progressive interpolation changes the bias
    assert (bias_at(small, 8, 5, 6, -2, -3) - bias_at(big, 30, 15, 20, -2, -3)).abs().max() > 1e-3
    # and within one grid it is not translation-invariant (unlike relbias): the reach moves with the query
    assert (bias_at(big, 30, 5, 6, -2, -3) - bias_at(big, 30, 15, 20, -2, -3)).abs().max() > 1e-3


def test_fire_serves_16x_the_training_grid_with_a_fixed_parameter_count():
    small = fire(img_size=8, depth=1, pos_kwargs={"fire_threshold": 1.0})  # a 2x2 training grid
    count = sum(p.numel() for p in small.pos.parameters())
    assert count == sum(
        p.numel() for p in fire(img_size=128, depth=1, pos_kwargs={"fire_threshold": 1.0}).pos.parameters()
    )
    with torch.no_grad():
        u = small.pos.inputs((32, 32))
        bias = small.pos.attn_pos((32, 32))[0].bias
        small.pos.method = "extrapolate"
        u_capped = small.pos.inputs((32, 32))
    assert u.abs().max() <= 1 + 1e-6 and u.abs().max() > 0.99  # progressive: the far edge maps to +-1
    assert torch.isfinite(bias).all() and bias.shape == (4, 1024, 1024)
    assert u_capped.abs().max() > 3  # the ablation: offsets of 31 patches against the trained reach of 1


def test_extrapolate_is_the_trained_bias_at_the_training_grid():
    m = fire(class_token=True)
    with torch.no_grad():
        trained = m.pos.attn_pos((8, 8))[1].bias
        m.pos.method = "extrapolate"
        assert torch.equal(m.pos.attn_pos((8, 8))[1].bias, trained)
        assert not torch.equal(m.pos.attn_pos((12, 8))[1].bias, (setattr(m.pos, "method", "progressive"),
                                                                 m.pos.attn_pos((12, 8))[1].bias)[1])  # fmt: skip
    assert trained.shape == (4, 65, 65) and torch.equal(
        trained[:, 0, 1:], m.pos.prefix_bias[1, :, 0, None].expand(4, 64)
    )


@pytest.mark.parametrize(("kw", "needle"), [({"fire_c": 0.0}, "fire_c"), ({"fire_threshold": -1.0}, "fire_threshold"),
                                            ({"fire_hidden": 0}, "fire_hidden")])  # fmt: skip
def test_bad_fire_options(kw, needle):
    with pytest.raises(ValueError, match=needle):
        fire(pos_kwargs=kw)
