"""Properties of alibi2d, lookhere and liere (the registry-wide tests cover the rest; rope2d-norm, a preset of rope2d
on normalised coordinates, is tested with the coordinate seam in test_coordinates.py).

What each scheme claims, and the test that checks it:

* alibi2d: bias = -2^(-8h/H) * Euclidean distance; it depends on the offset alone (and only its length);
* lookhere: each head sees exactly its field of view (checked against angles), penalised by distance;
  the bias depends on the offset alone and, unlike alibi2d's, tells left from right;
* liere: R(p) = exp(y G_y + x G_x) is orthogonal; R(p)^T R(q) = R(q - p) (relative) exactly when the
  generators commute: always for block size 2 (where it is RoPE-Mixed), along a line through the
  origin for any block size, and not in general for dense blocks;
* liere with ComRoPE's generators (``generators`` ap / ld): G_y and G_x commute for any parameters, so the logits
  depend on the offset alone everywhere, where free LieRE's do not; the default (free) computes what LieRE did.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import TRAIN  # noqa: E402

import vitpos
from vitpos.optim import param_groups
from vitpos.pos import POS_REGISTRY
from vitpos.pos.alibi2d import alibi_slopes
from vitpos.pos.base import rotate, rotate_blocks
from vitpos.pos.compose import ComposedPos
from vitpos.pos.liere import SkewExp, skew_exp, skew_exp_series, skew_from_coefficients

pytestmark = pytest.mark.usefixtures("one_thread")

EXACT = dict(rtol=0, atol=0)
FP32 = dict(rtol=1e-5, atol=1e-5)  # fp32 rotations and logits of unit-scale vectors
LOGIT = dict(rtol=1e-4, atol=1e-4)  # logits of random q, k after two fp32 rotations each
DET = dict(rtol=1e-4, atol=1e-4)  # determinant of an fp32 8x8 rotation (a product of 8 rounded factors)
VISIBLY = 1e-2  # a property that fails, fails by at least this much
ANGLE_SLACK = 1e-9  # fp64 rounding of an angle at the edge of a field of view (degrees)
EXP = dict(rtol=1e-10, atol=1e-10)  # fp64 matrix exponential against torch.linalg.matrix_exp
EXP_GRAD = dict(rtol=1e-9, atol=1e-9)  # its fp64 gradient against autograd through matrix_exp
FP64 = dict(rtol=1e-12, atol=1e-12)  # an fp64 identity
SERIES = dict(rtol=0, atol=1e-9)  # the fp64 scaling-and-squaring series against matrix_exp


def grid_yx(grid):
    ys, xs = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    return ys.flatten(), xs.flatten()


def offsets(grid):
    """(N, N) key-minus-query row and column offsets."""
    ys, xs = grid_yx(grid)
    return ys[None, :] - ys[:, None], xs[None, :] - xs[:, None]


def assert_offset_only(bias, grid):
    """bias (heads, N, N): every pair of tokens with the same offset holds the same value (-inf included)."""
    dy, dx = offsets(grid)
    key = ((dy + grid[0]) * (2 * grid[1] + 1) + dx + grid[1]).flatten()
    first = torch.full((int(key.max()) + 1,), key.numel()).scatter_reduce(0, key, torch.arange(key.numel()), "amin")
    flat = bias.detach().flatten(1)
    assert torch.equal(flat, flat[:, first[key]])


def mirror_lr(grid):
    """Index permutation of the tokens that mirrors the grid left-right."""
    ys, xs = grid_yx(grid)
    return ys * grid[1] + (grid[1] - 1 - xs)


# ---------------------------------------------------------------------------------------------
# alibi2d
# ---------------------------------------------------------------------------------------------


def test_alibi_slopes_are_geometric():
    torch.testing.assert_close(alibi_slopes(8), 2.0 ** -torch.arange(1, 9, dtype=torch.float64), **EXACT)
    torch.testing.assert_close(alibi_slopes(4), 2.0 ** (-2.0 * torch.arange(1, 5, dtype=torch.float64)), **EXACT)


@pytest.mark.parametrize("grid", [TRAIN, (12, 12), (5, 9), (1, 6)], ids=str)
@pytest.mark.parametrize("method", POS_REGISTRY["alibi2d"].methods)
def test_alibi2d_bias_formula_and_offset_only(tiny, grid, method):
    m = tiny("alibi2d")
    m.pos.method = method
    dy, dx = offsets(grid)
    if method == "scaled":
        dy, dx = dy * TRAIN[0] / grid[0], dx * TRAIN[1] / grid[1]
    dist = torch.sqrt(dy.double() ** 2 + dx.double() ** 2)
    heads = m.pos.num_heads
    expect = torch.stack([-(2.0 ** (-8 * h / heads)) * dist for h in range(1, heads + 1)]).float()
    attn = m.pos.attn_pos(grid)
    assert len(attn) == m.pos.depth and all(a.rope is None and a.rotation is None for a in attn)
    for a in attn:
        torch.testing.assert_close(a.bias, expect, **FP32)
        assert_offset_only(a.bias, grid)
        # only the length of the offset counts: the bias is symmetric and blind to a left-right mirror
        torch.testing.assert_close(a.bias, a.bias.transpose(-1, -2), **EXACT)
        mir = mirror_lr(grid)
        torch.testing.assert_close(a.bias[:, mir][:, :, mir], a.bias, **EXACT)
    assert not any(True for _ in m.pos.parameters())


def test_alibi2d_extrapolate_keeps_the_trained_reach_and_scaled_keeps_the_trained_span(tiny):
    m = tiny("alibi2d")
    train = m.pos.attn_pos(TRAIN)[0].bias
    big = m.pos.attn_pos((16, 16))[0].bias
    inner = (torch.arange(8)[:, None] * 16 + torch.arange(8)[None, :]).flatten()  # the top-left 8x8 tokens
    torch.testing.assert_close(big[:, inner][:, :, inner], train, **EXACT)
    m.pos.method = "scaled"
    big = m.pos.attn_pos((16, 16))[0].bias
    even = (torch.arange(0, 16, 2)[:, None] * 16 + torch.arange(0, 16, 2)[None, :]).flatten()
    torch.testing.assert_close(big[:, even][:, :, even], train, **FP32)  # token (2i, 2j) stands where (i, j) did


# ---------------------------------------------------------------------------------------------
# lookhere
# ---------------------------------------------------------------------------------------------

# centre of each field of view, degrees counter-clockwise from "right" (y grows downwards), and its half-width
FIELD_CENTRES = {
    180: [90, 270, 180, 0],
    90: [90, 270, 180, 0],
    45: [112.5, 247.5, 157.5, 22.5, 67.5, 292.5, 202.5, 337.5],
}


def visible_by_angle(grid, centre, fov):
    """(N, N) True where the key lies within fov/2 degrees of ``centre`` as seen from the query (or is it)."""
    dy, dx = offsets(grid)
    angle = torch.rad2deg(torch.atan2(-dy.double(), dx.double()))
    diff = torch.remainder(angle - centre + 180, 360) - 180
    return (diff.abs() <= fov / 2 + ANGLE_SLACK) | ((dy == 0) & (dx == 0))


@pytest.mark.parametrize("fov", [180, 90, 45])
@pytest.mark.parametrize("grid", [(7, 7), (5, 9)], ids=str)
def test_lookhere_heads_see_their_field_of_view_with_a_distance_penalty(tiny, fov, grid):
    kw = {"fov": fov, "global_slope": 1.5, "layer_slopes": (0.5, 2.0)}
    m = tiny("lookhere", embed_dim=128, num_heads=16, depth=3, pos_kwargs=kw)  # 16 heads: every field, two slopes
    centres = FIELD_CENTRES[fov]
    dy, dx = offsets(grid)
    dist = torch.sqrt(dy.double() ** 2 + dx.double() ** 2)
    for layer, (a, layer_slope) in enumerate(zip(m.pos.attn_pos(grid), [0.5, 1.25, 2.0])):
        assert a.bias.shape == (16, grid[0] * grid[1], grid[0] * grid[1])
        assert torch.isfinite(a.bias.diagonal(dim1=-2, dim2=-1)).all()  # a query always sees itself
        assert_offset_only(a.bias, grid)
        for h in range(16):
            seen = visible_by_angle(grid, centres[h % len(centres)], fov)
            assert torch.equal(torch.isfinite(a.bias[h]), seen), (layer, h)
            slope = 1.5 * layer_slope * 2.0 ** -(1 + h // len(centres))
            torch.testing.assert_close(a.bias[h][seen].double(), -slope * dist[seen], **FP32)
        assert (a.bias == float("-inf")).any() and (a.bias[torch.isfinite(a.bias)] < 0).any()


def test_lookhere_tells_left_from_right_where_alibi2d_cannot(tiny):
    """Mirroring the grid left-right swaps the left- and right-looking heads (180 degrees: heads 2 and 3)."""
    grid = (6, 8)
    mir = mirror_lr(grid)
    bias = tiny("lookhere").pos.attn_pos(grid)[0].bias  # 4 heads: up, down, left, right
    mirrored = bias[:, mir][:, :, mir]
    assert not torch.equal(mirrored, bias)
    torch.testing.assert_close(mirrored, bias[[0, 1, 3, 2]], **EXACT)


@pytest.mark.parametrize("method", POS_REGISTRY["lookhere"].methods)
def test_lookhere_class_token_rows_and_cols_are_zero_and_no_row_is_fully_masked(tiny, method):
    m = tiny("lookhere", class_token=True, global_pool="token")
    m.pos.method = method
    for grid in [TRAIN, (12, 10), (4, 5)]:
        n = grid[0] * grid[1]
        for a in m.pos.attn_pos(grid):
            assert a.bias.shape == (m.pos.num_heads, n + 1, n + 1)
            assert (a.bias[:, 0] == 0).all() and (a.bias[:, :, 0] == 0).all()
            assert torch.isfinite(a.bias.diagonal(dim1=-2, dim2=-1)).all()


def test_lookhere_scaled_method_and_bad_options(tiny):
    m = tiny("lookhere")
    train = m.pos.attn_pos(TRAIN)[0].bias
    m.pos.method = "scaled"
    big = m.pos.attn_pos((16, 16))[0].bias
    even = (torch.arange(0, 16, 2)[:, None] * 16 + torch.arange(0, 16, 2)[None, :]).flatten()
    torch.testing.assert_close(big[:, even][:, :, even], train, **FP32)
    for bad in ({"fov": 60}, {"global_slope": -1.0}, {"layer_slopes": (1.0, -0.5)}):
        with pytest.raises(ValueError, match="lookhere"):
            tiny("lookhere", pos_kwargs=bad)


def test_bias_schemes_keep_a_fixed_bias_out_of_the_learned_path(tiny):
    """No parameters: the bias needs no gradient, so attention hands SDPA a fixed 4-D mask (the fused kernel)."""
    for name in ("alibi2d", "lookhere", "alibi2d+peg"):
        m = tiny(name).train()
        assert all(not a.bias.requires_grad for a in m.pos.attn_pos(TRAIN))


# ---------------------------------------------------------------------------------------------
# liere
# ---------------------------------------------------------------------------------------------


def liere_by_hand(pos, layer, grid, ref_grid):
    """fp64 exp(y G_y + x G_x) per head and block, from the parameter: (heads, N, d/b, b, b)."""
    g = skew_from_coefficients(pos.generators[layer].detach().double(), pos.block_size)  # (heads, 2, K, b, b)
    ys, xs = grid_yx(grid)
    y, x = ys.double() / max(ref_grid[0] - 1, 1), xs.double() / max(ref_grid[1] - 1, 1)
    a = y[None, :, None, None, None] * g[:, None, 0] + x[None, :, None, None, None] * g[:, None, 1]
    return torch.linalg.matrix_exp(a)


def test_skew_from_coefficients():
    c = torch.randn(2, 6)
    s = skew_from_coefficients(c, 4)
    torch.testing.assert_close(s, -s.transpose(-1, -2), **EXACT)
    assert s[0, 0, 1] == c[0, 0] and s[0, 0, 3] == c[0, 2] and s[0, 2, 3] == c[0, 5]
    assert (s.diagonal(dim1=-2, dim2=-1) == 0).all()


@pytest.mark.parametrize("b", [2, 5, 8])
def test_skew_exp_matches_matrix_exp_and_its_gradient(b):
    """The eigendecomposition path agrees with torch's matrix_exp, value and gradient, at A = 0 too."""
    coeffs = torch.randn(6, b * (b - 1) // 2, dtype=torch.float64) * 3
    coeffs[0] = 0  # the origin token: all eigenvalues equal
    a = skew_from_coefficients(coeffs, b).requires_grad_()
    g = torch.randn(6, b, b, dtype=torch.float64)
    ours, ref = SkewExp.apply(a), torch.linalg.matrix_exp(a)
    torch.testing.assert_close(ours, ref, **EXP)
    (grad_ours,) = torch.autograd.grad(ours, a, g)
    (grad_ref,) = torch.autograd.grad(ref, a, g)
    torch.testing.assert_close(grad_ours, grad_ref, **EXP_GRAD)
    torch.testing.assert_close(grad_ours[0], g[0], **FP64)  # d exp at 0 is the identity map
    a32 = a.detach().float().requires_grad_()
    out32 = SkewExp.apply(a32)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), ref.detach(), **FP32)


@pytest.mark.parametrize("norm", [0.0, 1.0, 30.0, 300.0])
def test_the_series_exp_used_for_export_matches_matrix_exp(norm):
    """Scaling and squaring (matmuls only, what ONNX can run) agrees with matrix_exp far beyond real norms."""
    a = skew_from_coefficients(torch.randn(3, 28, dtype=torch.float64), 8)
    a = a / torch.linalg.matrix_norm(a, 2)[:, None, None] * norm
    torch.testing.assert_close(skew_exp_series(a), torch.linalg.matrix_exp(a), **SERIES)
    assert skew_exp_series(a.float()).dtype == torch.float32


@pytest.mark.parametrize("method", ["interpolate", "extrapolate"])
@pytest.mark.parametrize("block_size", [None, 2, 4])
@pytest.mark.parametrize("grid", [TRAIN, (5, 11)], ids=str)
def test_liere_rotations_are_orthogonal_exponentials_of_the_generators(tiny, block_size, grid, method):
    m = tiny("liere", pos_kwargs={} if block_size is None else {"block_size": block_size})
    m.pos.method = method  # the spacing: the new grid's own (interpolate) or the training grid's (extrapolate)
    ref = grid if method == "interpolate" else TRAIN
    b = block_size or m.pos.head_dim  # default: one dense block over the head
    assert m.pos.block_size == b
    assert m.pos.generators.shape == (2, 4, 2, 8 // b, b * (b - 1) // 2)
    assert m.pos.generators.min() >= 0 and m.pos.generators.max() < 2 * math.pi  # LieRE's U[0, 2 pi) init
    for layer, a in enumerate(m.pos.attn_pos(grid)):
        r = a.rotation
        assert a.rope is None and a.bias is None and r.dtype == torch.float32
        assert r.shape == (4, grid[0] * grid[1], 8 // b, b, b)
        torch.testing.assert_close(r.detach().double(), liere_by_hand(m.pos, layer, grid, ref), **FP32)
        eye = torch.eye(b).expand_as(r)
        torch.testing.assert_close(r.transpose(-1, -2) @ r, eye, **FP32)  # orthogonal
        torch.testing.assert_close(torch.linalg.det(r.detach()), torch.ones(r.shape[:-2]), **DET)  # in SO(b)
        torch.testing.assert_close(r[:, 0], eye[:, 0], **FP32)  # R(0) = I at token (0, 0)
        x = torch.randn(2, 4, grid[0] * grid[1], 8)
        torch.testing.assert_close(rotate_blocks(x, r).norm(dim=-1), x.norm(dim=-1), **FP32)
        assert (rotate_blocks(x, r) - x).abs().max() > VISIBLY


def test_liere_block_2_is_rope_mixed(tiny):
    """b = 2: exp([[0, a], [-a, 0]]) turns each pair by -a, a = y g_y + x g_x: rope with learned 2D frequencies."""
    m = tiny("liere", pos_kwargs={"block_size": 2})
    m.pos.method = "extrapolate"  # positions in the training grid's units, i / 7, on any grid
    grid = (6, 7)
    ys, xs = grid_yx(grid)
    g = m.pos.generators[0].detach()[..., 0]  # (heads, 2, d/2)
    angle = -(ys[None, :, None] / 7 * g[:, None, 0] + xs[None, :, None] / 7 * g[:, None, 1])  # (heads, N, d/2)
    rope = torch.stack([angle.cos(), angle.sin()], dim=-1)
    x = torch.randn(3, 4, 42, 8)
    torch.testing.assert_close(rotate_blocks(x, m.pos.attn_pos(grid)[0].rotation), rotate(x, rope), **FP32)


def liere_shift_gap(m, small, big, shift, row0=False):
    """max |logit(p, r) - logit(p + shift, r + shift)| over random pairs and heads of block 0."""
    rot_small = m.pos.attn_pos(small)[0].rotation  # (heads, N, K, b, b)
    rot_big = rot_small if big == small else m.pos.attn_pos(big)[0].rotation
    heads, n, d = m.pos.num_heads, 256, m.pos.head_dim
    q, k = torch.randn(1, heads, n, d), torch.randn(1, heads, n, d)
    y1, y2 = torch.zeros(2, n, dtype=torch.long) if row0 else torch.randint(0, small[0] - shift[0], (2, n))
    x1, x2 = torch.randint(0, small[1] - shift[1], (2, n))
    i, j = y1 * small[1] + x1, y2 * small[1] + x2
    bi, bj = (y1 + shift[0]) * big[1] + x1 + shift[1], (y2 + shift[0]) * big[1] + x2 + shift[1]

    def logits(rot, a, b):
        return (rotate_blocks(q, rot[:, a]) * rotate_blocks(k, rot[:, b])).sum(-1)

    here, there = logits(rot_small, i, j), logits(rot_big, bi, bj)
    assert (here - (q * k).sum(-1)).abs().max() > VISIBLY  # the rotation does something
    return float((here - there).detach().abs().max())


def test_liere_relative_when_generators_commute(tiny):
    """b = 2 always commutes: 2D shifts keep every logit. Dense blocks with G_x = c G_y commute too."""
    m = tiny("liere", pos_kwargs={"block_size": 2}).eval()
    assert liere_shift_gap(m, (12, 12), (12, 12), (3, 2)) < LOGIT["atol"] * 10
    dense = tiny("liere").eval()
    with torch.no_grad():
        dense.pos.generators[:, :, 1] = 0.7 * dense.pos.generators[:, :, 0]  # G_x = 0.7 G_y: they commute
        dense.pos.generators.mul_(0.2)  # keep angles moderate so fp32 exponentials agree to LOGIT
    assert liere_shift_gap(dense, (12, 12), (12, 12), (3, 2)) < LOGIT["atol"] * 10


def test_liere_dense_is_not_relative_in_2d_but_is_along_a_line_through_the_origin(tiny):
    m = tiny("liere").eval()  # b = head dim: G_y, G_x drawn independently do not commute
    with torch.no_grad():
        m.pos.generators.mul_(0.2)
    g = skew_from_coefficients(m.pos.generators[0, 0].double(), 8)[:, 0]  # head 0: (2, b, b)
    assert (g[0] @ g[1] - g[1] @ g[0]).abs().max() > VISIBLY
    assert liere_shift_gap(m, (12, 12), (12, 12), (3, 2)) > VISIBLY  # absolute position enters the logit
    # along the first row, positions (0, x) are multiples of one generator: shifting along it is relative
    assert liere_shift_gap(m, (12, 12), (12, 12), (0, 3), row0=True) < LOGIT["atol"] * 10


def test_liere_transfer_methods(tiny):
    m = tiny("liere").eval()
    assert m.pos.method == "interpolate"  # chosen on validation (docs/protocol.md)
    train = m.pos.attn_pos(TRAIN)[0].rotation
    m.pos.method = "extrapolate"  # the training spacing: the 16x16 grid's top-left 8x8 is the training grid
    inner = (torch.arange(8)[:, None] * 16 + torch.arange(8)[None, :]).flatten()
    torch.testing.assert_close(m.pos.attn_pos((16, 16))[0].rotation[:, inner], train, **FP32)
    m.pos.method = "interpolate"  # the 15x15 grid squeezed onto [0, 1]: token (2i, 2j) sits where (i, j) did
    big = m.pos.attn_pos((15, 15))[0].rotation
    even = (torch.arange(0, 15, 2)[:, None] * 15 + torch.arange(0, 15, 2)[None, :]).flatten()
    torch.testing.assert_close(big[:, even], train, **FP32)
    torch.testing.assert_close(big.detach().double(), liere_by_hand(m.pos, 0, (15, 15), (15, 15)), **FP32)


def test_liere_class_token_gets_the_identity_and_generators_learn_without_decay(tiny):
    m = tiny("liere", class_token=True, global_pool="token")
    for a in m.pos.attn_pos((6, 9)):
        assert a.rotation.shape == (4, 55, 1, 8, 8)
        assert torch.equal(a.rotation[:, 0], torch.eye(8).expand(4, 1, 8, 8))
    m.train()
    m(torch.randn(2, 3, 24, 36)).square().mean().backward()
    g = m.pos.generators.grad
    assert g is not None and (g.flatten(2).abs().sum(-1) > 0).all()  # every block and head
    assert m.pos.no_weight_decay() == {"generators"}
    _, no_decay = param_groups(m, 0.05, 1e-3)
    assert any(p is m.pos.generators for p in no_decay["params"])


def test_liere_rotation_stays_fp32_under_bf16_and_rejects_bad_blocks(tiny):
    m = tiny("liere").train()
    ref = m.pos.attn_pos((10, 10))[0].rotation
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rot = m.pos.attn_pos((10, 10))[0].rotation
        out = m(torch.randn(1, 3, 40, 40))
    assert rot.dtype == torch.float32 and out.dtype == torch.bfloat16
    torch.testing.assert_close(rot, ref, **EXACT)
    for bad in (3, 1, 16):
        with pytest.raises(ValueError, match="block_size"):
            tiny("liere", pos_kwargs={"block_size": bad})


# -- ComRoPE's commuting generators (``generators`` ap / ld) -------------------------------------------------


def liere_random(tiny, generators, block_size=None, spread=1.0, **kw):
    """An eval-mode liere model whose position parameters are drawn N(0, spread^2): random, not their start;
    it serves every grid at the training grid's spacing (``extrapolate``)."""
    kwargs = {"generators": generators} | ({} if block_size is None else {"block_size": block_size})
    m = tiny("liere", pos_kwargs=kwargs, **kw).eval()
    m.pos.method = "extrapolate"  # one spacing on every grid: a shift moves a pair alike on each
    with torch.no_grad():
        for p in m.pos.parameters():
            p.normal_(0, spread)
    return m


def comrope_by_hand(pos):
    """fp64 (depth, heads, 2, d/b, b, b) G_y, G_x built block by block from the parameters, as ComRoPE writes them:
    ap turns block j with axis j mod 2 only; ld turns block j by s_aj B_j on axis a."""
    b, k = pos.block_size, pos.head_dim // pos.block_size
    g = torch.zeros(pos.depth, pos.num_heads, 2, k, b, b, dtype=torch.float64)
    coeffs = pos.generators.detach().double()
    for j in range(k):
        if pos.kind == "ap":
            g[:, :, j % 2, j] = skew_from_coefficients(coeffs[:, :, j % 2, j // 2], b)
        else:
            base = skew_from_coefficients(coeffs[:, :, 0, j], b)
            for axis in range(2):
                g[:, :, axis, j] = pos.axis_scales.detach().double()[:, :, axis, j, None, None] * base
    return g


def commutator(g):
    """max |G_y G_x - G_x G_y| per head, over layers and blocks, and the smaller of |G_y|, |G_x| per head."""
    gy, gx = g.unbind(2)
    return (gy @ gx - gx @ gy).abs().amax((0, 2, 3, 4)), torch.minimum(gy.abs().amax((0, 2, 3, 4)),
                                                                          gx.abs().amax((0, 2, 3, 4)))  # fmt: skip


@pytest.mark.parametrize(("generators", "block_size"), [("free", None), ("free", 4), ("ap", None), ("ap", 2),
                                                         ("ld", None), ("ld", 2), ("ld", 4)])  # fmt: skip
def test_comrope_generators_commute_for_any_parameters_and_free_ones_do_not(tiny, generators, block_size):
    m = liere_random(tiny, generators, block_size, spread=2.0)
    g = m.pos.skew()
    assert g.shape == (2, 4, 2, 8 // m.pos.block_size, m.pos.block_size, m.pos.block_size)
    comm, size = commutator(g.detach().double())
    assert (size > VISIBLY).all()  # both axes turn in every head: commuting is not 0 = 0
    if generators == "free":
        assert (comm > VISIBLY).all()  # LieRE's independent generators do not commute
    else:
        assert (comm < FP32["atol"] * size**2).all(), comm
        torch.testing.assert_close(g.detach().double(), comrope_by_hand(m.pos), **FP32)


@pytest.mark.parametrize("generators", ["free", "ap", "ld"])
def test_comrope_logits_depend_only_on_the_offset_where_free_liere_does_not(tiny, generators):
    """Pairs of tokens moved by one 2D shift, off any line through token (0, 0), on the training grid and
    beyond it (extrapolation): ap and ld keep every logit, free LieRE changes them."""
    m = liere_random(tiny, generators, block_size=4 if generators == "ld" else None, spread=0.5)
    for small, big, shift in [((12, 12), (12, 12), (3, 2)), (TRAIN, (13, 11), (4, 2))]:
        gap = liere_shift_gap(m, small, big, shift)
        assert gap > VISIBLY if generators == "free" else gap < LOGIT["atol"] * 10, (small, big, gap)


@pytest.mark.parametrize(("generators", "block_size"), [("ap", None), ("ld", None), ("ld", 2)])
def test_comrope_rotations_are_orthogonal_exponentials_and_serve_an_unseen_non_square_grid(tiny, generators,
                                                                                          block_size):  # fmt: skip
    m = liere_random(tiny, generators, block_size, class_token=True, global_pool="token")
    b, grid = m.pos.block_size, (5, 11)
    g = comrope_by_hand(m.pos)
    ys, xs = grid_yx(grid)
    y, x = ys.double() / (TRAIN[0] - 1), xs.double() / (TRAIN[1] - 1)  # extrapolate: the training spacing
    algebra = y[:, None, None, None] * g[:, :, None, 0] + x[:, None, None, None] * g[:, :, None, 1]
    expect = torch.linalg.matrix_exp(algebra)  # (depth, heads, N, d/b, b, b)
    for layer, a in enumerate(m.pos.attn_pos(grid)):
        r = a.rotation
        assert r.shape == (4, 1 + 55, 8 // b, b, b) and r.dtype == torch.float32
        eye = torch.eye(b).expand_as(r)
        torch.testing.assert_close(r[:, 0], eye[:, 0], **EXACT)  # the class token: never turned
        torch.testing.assert_close(r[:, 1:].double(), expect[layer], **FP32)
        torch.testing.assert_close(r.transpose(-1, -2) @ r, eye, **FP32)  # orthogonal
        torch.testing.assert_close(r[:, 1], eye[:, 1], **FP32)  # R(0) = I at token (0, 0)
        assert (r[:, 1:] - eye[:, 1:]).abs().amax() > VISIBLY
    with torch.no_grad():
        out = m(torch.randn(2, 3, 20, 44))
    assert out.shape == (2, 5) and torch.isfinite(out).all()


def test_free_liere_is_the_default_and_computes_what_liere_did(tiny):
    """The default draws LieRE's generators as before (one U[0, 2 pi) draw, nothing else) and turns by
    exp(y G_y + x G_x) through the same operations: bit for bit."""
    torch.manual_seed(3)
    default = tiny("liere", class_token=True, global_pool="token").eval()
    torch.manual_seed(3)
    free = tiny("liere", class_token=True, global_pool="token", pos_kwargs={"generators": "free"}).eval()
    torch.manual_seed(3)
    scheme = POS_REGISTRY["liere"](dim=32, num_heads=4, depth=2, grid=TRAIN)
    torch.manual_seed(3)
    assert torch.equal(scheme.generators, torch.rand(2, 4, 2, 1, 28) * (2 * math.pi))
    assert [n for n, _ in default.pos.named_parameters()] == ["generators"] and default.pos.kind == "free"
    skew = skew_from_coefficients(default.pos.generators.detach(), 8)
    pos = default.pos.positions((6, 9))
    rot = skew_exp(torch.einsum("nc,lhckij->lhnkij", pos, skew))  # (depth, heads, N, 1, 8, 8)
    for layer, a in enumerate(default.pos.attn_pos((6, 9))):
        assert torch.equal(a.rotation[:, 1:], rot[layer])
    x = torch.randn(2, 3, 24, 36)
    with torch.no_grad():
        assert torch.equal(default(x), free(x))


def test_comrope_learns_every_parameter_without_decay_and_an_edit_reaches_the_cache(tiny):
    m = tiny("liere", pos_kwargs={"generators": "ld", "block_size": 4}).train()
    assert m.pos.axis_scales.shape == (2, 4, 2, 2) and m.pos.generators.shape == (2, 4, 1, 2, 6)
    m(torch.randn(2, 3, 32, 32)).square().mean().backward()
    for p in m.pos.parameters():
        assert p.grad is not None and (p.grad.flatten(2).abs().sum(-1) > 0).all()  # every block and head
    assert m.pos.no_weight_decay() == {"generators", "axis_scales"}
    m.eval()
    with torch.no_grad():  # served from the cache
        before = m.pos.attn_pos(TRAIN)[0].rotation
        m.pos.axis_scales.data[0, 0, 1] *= 2  # layer 0, head 0, the x axis
        after = m.pos.attn_pos(TRAIN)[0].rotation
    assert (after[0] - before[0]).abs().amax() > VISIBLY and torch.equal(after[1:], before[1:])


@pytest.mark.parametrize("generators", ["ap", "ld"])
def test_comrope_carried_to_a_new_grid_keeps_its_rotations(tiny, generators):
    """state_at_grid under ``extrapolate`` rescales what carries each axis (ld's scales, ap's matrices): a model
    built at the new grid turns as the original extrapolates."""
    src = liere_random(tiny, generators)
    dst = tiny("liere", img_size=48, pos_kwargs={"generators": generators}).eval()
    dst.pos.load_state_dict(src.pos.state_at_grid((12, 12)))
    torch.testing.assert_close(dst.pos.attn_pos((12, 12))[1].rotation, src.pos.attn_pos((12, 12))[1].rotation, **FP32)


def test_comrope_options_are_checked_and_kept_by_a_checkpoint(tmp_path, capsys):
    from vitpos.checkpoint import FORMAT, model_from_checkpoint
    from vitpos.config import Config, model_from_config
    from vitpos.training import main

    assert main(["--pos", "liere", "--pos-kwarg", "generators=commuting", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "liere generators must be one of free, ap, ld, got 'commuting'" in err
    with pytest.raises(ValueError, match="generators=ap .* block_size must divide half the head dim 8, got 8"):
        vitpos.create_model("liere", embed_dim=32, num_heads=4, pos_kwargs={"generators": "ap", "block_size": 8})
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = "liere", 32, 1, 2
    cfg.model.pos_kwargs = {"generators": "ld", "block_size": 4}
    model = model_from_config(cfg).eval()
    with torch.no_grad():
        model.pos.axis_scales.normal_()
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    path = tmp_path / "ld.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"config": cfg.to_dict()}, "vitpos_format": FORMAT}, path)
    loaded_cfg, loaded = model_from_checkpoint(path)
    assert loaded_cfg.model.pos_kwargs == {"generators": "ld", "block_size": 4} and loaded.pos.kind == "ld"
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_compositions_of_the_new_schemes(tiny):
    m = tiny("alibi2d+peg")
    # its own default, chosen on validation, then the rest of the product
    assert m.pos.methods == ("scaled+conv", "extrapolate+conv", "extrapolate+dilate", "scaled+dilate")
    for a, b in zip(m.pos.attn_pos((6, 10)), m.pos.parts["alibi2d"].attn_pos((6, 10))):
        assert torch.equal(a.bias, b.bias) and a.rotation is None
    registry = {k: v for k, v in POS_REGISTRY.items() if "+" not in k}
    kw = dict(dim=32, num_heads=4, depth=2, grid=TRAIN)
    with pytest.raises(ValueError, match="one part"):  # two q/k rotations cannot both apply
        ComposedPos.of("liere+rope2d", registry)(**kw).attn_pos(TRAIN)
    both = ComposedPos.of("lookhere+liere", registry)(**kw)  # a bias and a block rotation combine
    a = both.attn_pos(TRAIN)[0]
    assert a.bias is not None and a.rotation is not None
    assert {"alibi2d", "lookhere", "rope2d-norm", "liere", "alibi2d+peg"} <= set(vitpos.POS_SCHEMES)


@pytest.mark.parametrize(
    "kwarg",
    ["fov=30", "block_size=3", "coords=area", "bogus=1", "theta=-1", "theta=1", "theta=0.5"],
    ids=["lookhere", "liere", "rope2d-norm", "alibi2d", "rope2d", "rope2d-mixed", "rope2d-norm-base"],
)
def test_a_bad_scheme_option_is_one_line_and_exit_2(kwarg, request, tmp_path, capsys):
    from vitpos.training import main

    pos = request.node.callspec.id.removesuffix("-base")
    assert main(["--pos", pos, "--pos-kwarg", kwarg, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"train.py: error: --pos {pos} ")
    assert not (tmp_path / "run").exists()


def test_an_unknown_scheme_option_names_the_options_the_scheme_takes(tmp_path, capsys):
    from vitpos.pos import build_pos
    from vitpos.training import main

    assert main(["--pos", "rope2d", "--pos-kwarg", "foo=1", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == (
        "train.py: error: --pos rope2d with --pos-kwarg {'foo': 1}: rope2d has no option foo; "
        "its options: theta, coords, order, yarn_alpha, yarn_beta, yarn_temperature"
    )
    with pytest.raises(ValueError, match="^learned has no option theta; its options: init_std$"):
        build_pos("rope2d+learned", dim=32, num_heads=2, depth=1, grid=(4, 4), learned={"theta": 10.0})
