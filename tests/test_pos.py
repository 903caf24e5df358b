"""Properties of the position schemes, checked through the seam (``model.pos``) and against timm."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import TRAIN, with_grads  # noqa: E402
from timm.layers import (
    apply_rot_embed,
    build_sincos2d_pos_embed,
    gen_relative_position_index,
    resample_abs_pos_embed,
)

import vitpos
from vitpos.pos.base import rotate
from vitpos.pos.relbias import relative_position_index

pytestmark = pytest.mark.usefixtures("one_thread")

# Tolerances, named by what they compare
TRIG = dict(atol=1e-6, rtol=0)  # fp32 cos/sin or sincos entries (|v| <= 1) against the same formula: a few ulps
TIMM_TABLE = dict(atol=1e-5, rtol=0)  # the fp32 sincos table against timm's, its angles computed in another order
LOGIT = dict(atol=1e-4, rtol=1e-4)  # logits of random q, k after two fp32 rotations each
FP32 = dict(atol=1e-5, rtol=1e-5)  # an fp32 rotation against its fp64 reference
BF16 = dict(atol=2e-2, rtol=2e-2)  # the same in bf16 (8 significant bits)
BF16_GRAD = dict(atol=5e-2, rtol=5e-2)  # a bf16 gradient through the rotation against the fp32 one
FP64_RTOL = 1e-12  # fp64 frequencies against their closed form
FP64 = dict(rtol=FP64_RTOL, atol=0)
VISIBLY = 1e-2  # a rotation that does something moves the logits by at least this
DISTINCT = 1e-3  # two positions' rotations (or table rows) differ by at least this


def pos_outputs(pos, grid) -> list[torch.Tensor]:
    """Everything the scheme hands the ViT for ``grid``, as a flat list of tensors (all three hooks)."""
    n = grid[0] * grid[1]
    out = [pos.tokens(torch.zeros(1, n, pos.dim), grid)]
    for a in pos.attn_pos(grid):
        out += [t for t in (a.rope, a.bias, a.rotation, a.mix) if t is not None] + [torch.tensor(a.logit_scale)]
    x = torch.linspace(-1, 1, (pos.num_prefix_tokens + n) * pos.dim).reshape(1, -1, pos.dim)  # fixed input
    return out + [pos.after_block(x, grid, i) for i in range(pos.depth)]


# ---------------------------------------------------------------------------------------------
# caching, for every scheme
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [TRAIN, (12, 12), (6, 10)])
@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_second_eval_forward_does_not_recompute(tiny, name, grid, builds):
    m = tiny(name).eval()
    x = torch.randn(2, 3, grid[0] * 4, grid[1] * 4)
    with torch.no_grad():
        first = m(x)
        misses = builds()
        second = m(x)
    assert builds() == misses
    torch.testing.assert_close(first, second, rtol=0, atol=0)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.5),
        lambda ps: torch.optim.AdamW(ps, lr=0.5, foreach=True),
        # Fused kernels update parameters without bumping their version counter.
        lambda ps: torch.optim.AdamW(ps, lr=0.5, fused=True),
    ],
    ids=["sgd", "adamw-foreach", "adamw-fused"],
)
@pytest.mark.parametrize("grid", [TRAIN, (12, 12)])
@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_optimizer_step_never_leaves_the_cache_stale(tiny, name, grid, make_opt):
    """Train -> step -> eval (as Lightning does): eval must see the stepped parameters."""
    m = tiny(name).eval()
    with torch.no_grad():
        before = [t.clone() for t in pos_outputs(m.pos, grid)]  # fills the cache
    params_before = [p.detach().clone() for p in m.pos.parameters()]
    opt = make_opt(list(m.parameters()))
    with_grads(m)
    opt.step()
    m.eval()
    with torch.no_grad():
        served = pos_outputs(m.pos, grid)
        m.pos._cache.clear()
        fresh = pos_outputs(m.pos, grid)
    for s, f in zip(served, fresh):
        torch.testing.assert_close(s, f, rtol=0, atol=0)
    # SGD moves liere's generators (entries ~ pi, gradients ~ 1e-9 at init) by less than fp32 resolves: only a
    # step that changed a position parameter must change what the scheme serves
    if any(not torch.equal(b, p) for b, p in zip(params_before, m.pos.parameters())):
        assert any(not torch.equal(b, f) for b, f in zip(before, fresh))


WITH_PARAMS = [
    n
    for n in vitpos.POS_SCHEMES
    if any(True for _ in vitpos.create_model(n, embed_dim=32, depth=1, num_heads=4).pos.parameters())
]


@pytest.mark.parametrize("edit", ["data", "load_state_dict"])
@pytest.mark.parametrize("grid", [TRAIN, (12, 12)])
@pytest.mark.parametrize("name", WITH_PARAMS)
def test_edited_parameters_never_leave_the_cache_stale(tiny, name, grid, edit):
    """Parameters changed behind autograd's back (``.data``, a loaded state dict: no version bump) must
    be seen by the next eval forward, which equals that of a freshly built model with those weights."""
    m = tiny(name).eval()
    x = torch.randn(2, 3, grid[0] * 4, grid[1] * 4)
    with torch.no_grad():
        before = m(x)  # fills the cache
        if edit == "data":
            for p in m.pos.parameters():
                p.data.mul_(2).add_(0.01)  # not only x2: a parameter may start at 0 (string's S)
        else:
            m.load_state_dict({k: v * 2 + 0.01 if k.startswith("pos.") else v for k, v in m.state_dict().items()})
        fresh = tiny(name).eval()
        fresh.load_state_dict(m.state_dict())
        after, expected = m(x), fresh(x)
    torch.testing.assert_close(after, expected, rtol=0, atol=0)
    assert not torch.equal(after, before)  # the edit changed the output: a stale cache would fail above


def test_method_setter_rejects_unknown_and_clears_cache(tiny):
    m = tiny("rope2d").eval()
    with torch.no_grad():
        m.pos.attn_pos((12, 12))
    assert m.pos._cache
    with pytest.raises(ValueError, match="extrapolate"):
        m.pos.method = "bogus"
    m.pos.method = "interpolate"
    assert not m.pos._cache


# ---------------------------------------------------------------------------------------------
# rope2d
# ---------------------------------------------------------------------------------------------

BF16_EPS = 2.0**-8  # bf16 keeps 8 significant bits: one rounding is off by at most half of 2^-7, relative
FP32_SLACK = 1e-6  # the fp32 arithmetic before that rounding (products of |x| <~ 5 with cos/sin)


def test_bf16_rotation_rounds_once(tiny):
    """A bf16 q rotated over a 32x32 grid is the fp64 rotation of that q, rounded to bf16 once: each element
    within BF16_EPS of its exact value (relative). cos/sin rounded to bf16 first were off by up to 0.034."""
    m = tiny("rope2d", embed_dim=128, num_heads=4)
    rot = m.pos.attn_pos((32, 32))[0].rope  # fp32 (cos, sin)
    q = torch.randn(2, 4, 32 * 32, 32).bfloat16()
    exact = rotate(q.double(), rot.double())
    got = rotate(q, rot)
    assert got.dtype == torch.bfloat16
    err = (got.double() - exact).abs()
    assert (err <= BF16_EPS * exact.abs() + FP32_SLACK).all()
    # the negative control: rounding cos/sin to bf16 first breaks the bound
    coarse = rotate(q.double(), rot.bfloat16().double())
    assert ((coarse - exact).abs() > BF16_EPS * exact.abs()).any()


def rope(m, grid, method=None):
    """cos, sin (N, d/2) of block 0's rotation, and its logit scale."""
    if method is not None:
        m.pos.method = method
    a = m.pos.attn_pos(grid)[0]
    return a.rope[..., 0], a.rope[..., 1], a.logit_scale


def turn(x, cos, sin):
    return rotate(x, torch.stack([cos, sin], dim=-1))


@pytest.mark.parametrize("big", [(13, 15), (8, 12), (20, 9)])
def test_rope2d_logit_depends_only_on_offset(tiny, big):
    m = tiny("rope2d", embed_dim=64)  # head_dim 16: 4 frequencies per axis
    (h, w), (bh, bw) = TRAIN, big
    cos, sin, _ = rope(m, TRAIN)
    cos2, sin2, _ = rope(m, big, "extrapolate")
    n, d = 256, 2 * cos.shape[-1]
    q, k = torch.randn(n, d), torch.randn(n, d)
    y1, y2 = torch.randint(0, h, (2, n))
    x1, x2 = torch.randint(0, w, (2, n))
    a, b = torch.randint(0, bh - h + 1, (n,)), torch.randint(0, bw - w + 1, (n,))

    def logits(cos, sin, width, ya, xa, yb, xb):
        i, j = ya * width + xa, yb * width + xb
        return (turn(q, cos[i], sin[i]) * turn(k, cos[j], sin[j])).sum(-1)

    here = logits(cos, sin, w, y1, x1, y2, x2)
    shifted = logits(cos2, sin2, bw, y1 + a, x1 + b, y2 + a, x2 + b)
    torch.testing.assert_close(shifted, here, **LOGIT)
    assert not torch.allclose(here, (q * k).sum(-1), atol=VISIBLY)  # the rotation does something


def test_rope2d_angles_match_formula(tiny):
    """Pins the construction: f_k = theta^(-4k/d); pair angles [x f, y f], one per interleaved pair."""
    m = tiny("rope2d", embed_dim=64)
    m.pos.method = "extrapolate"  # integer positions at every grid (the default interpolates a new one)
    d = m.pos.head_dim
    f = m.pos.theta ** (-4.0 * torch.arange(d // 4, dtype=torch.float64) / d)
    for grid in [TRAIN, (5, 11)]:
        ys, xs = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
        ang = torch.cat([xs.reshape(-1, 1) * f, ys.reshape(-1, 1) * f], dim=1)  # (N, d/2)
        cos, sin, _ = rope(m, grid)
        torch.testing.assert_close(cos, ang.cos().float(), **TRIG)
        torch.testing.assert_close(sin, ang.sin().float(), **TRIG)


@pytest.mark.parametrize("method", vitpos.POS_REGISTRY["rope2d"].methods)
@pytest.mark.parametrize("grid", [TRAIN, (12, 16), (5, 7)])
def test_rope2d_rotation_preserves_norm_and_matches_timm_layout(tiny, method, grid):
    m = tiny("rope2d")
    cos, sin, _ = rope(m, grid, method)
    x = torch.randn(2, m.pos.num_heads, grid[0] * grid[1], m.pos.head_dim)
    y = turn(x, cos, sin)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    # timm's interleaved form: x * cos + rot(x) * sin with each angle repeated for its pair
    timm_y = apply_rot_embed(x, sin.repeat_interleave(2, -1), cos.repeat_interleave(2, -1))
    torch.testing.assert_close(y, timm_y)
    assert not torch.allclose(y, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rotate_paths_agree_on_strided_views(dtype):
    """The complex path (fp32/fp64), the real path (bf16) and a non-contiguous q from qkv all rotate alike."""
    rot = torch.view_as_real(torch.polar(torch.ones(12, 8), torch.randn(12, 8) * 3))  # (N, d/2, 2)
    qkv = torch.randn(2, 12, 3 * 2 * 16, dtype=dtype)  # (B, N, 3 h d): q, k, v are strided views
    q = qkv.unflatten(-1, (3, 2, 16)).permute(2, 0, 3, 1, 4)[0]  # (B, h, N, d)
    xr = q.double().unflatten(-1, (-1, 2))
    c, s = rot.double().unbind(-1)
    ref = torch.stack([xr[..., 0] * c - xr[..., 1] * s, xr[..., 0] * s + xr[..., 1] * c], -1).flatten(-2)
    tol = BF16 if dtype == torch.bfloat16 else FP32
    out = rotate(q, rot)
    assert out.dtype == dtype and out.shape == q.shape
    torch.testing.assert_close(out.double(), ref, **tol)
    torch.testing.assert_close(rotate(q.contiguous(), rot), out, rtol=0, atol=0)
    odd = torch.randn(1, 2, 12, 17, dtype=dtype)[..., 1:]  # odd storage offset: copied, still right
    torch.testing.assert_close(rotate(odd, rot).double(), rotate(odd.contiguous(), rot).double(), rtol=0, atol=0)


def test_rotate_gradient_is_the_inverse_rotation():
    """Backward of a rotation turns the gradient back (R^T = R^-1), on the complex path as on the real one."""
    angle = torch.randn(6, 4)
    rot = torch.stack([angle.cos(), angle.sin()], -1)
    x = torch.randn(3, 2, 6, 8, requires_grad=True)
    g = torch.randn(3, 2, 6, 8)
    (grad,) = torch.autograd.grad(rotate(x, rot), x, g)
    torch.testing.assert_close(grad, rotate(g, torch.stack([angle.cos(), -angle.sin()], -1)))
    xb = x.detach().bfloat16().requires_grad_()
    (grad_b,) = torch.autograd.grad(rotate(xb, rot), xb, g.bfloat16())
    torch.testing.assert_close(grad_b.float(), grad, **BF16_GRAD)


def test_rope2d_every_token_gets_its_own_rotation(tiny):
    cos, sin, _ = rope(tiny("rope2d"), (6, 10))
    rows = torch.cat([cos, sin], dim=1)
    dist = torch.cdist(rows, rows) + torch.eye(len(rows)) * 10
    assert dist.min() > DISTINCT  # no two (y, x) positions share a rotation (catches one axis used twice)


@pytest.mark.parametrize("grid", [TRAIN, (12, 12), (4, 6)])
def test_rope2d_class_token_is_not_rotated(tiny, grid):
    m = tiny("rope2d", class_token=True, global_pool="token")
    cos, sin, _ = rope(m, grid)
    assert cos.shape[0] == 1 + grid[0] * grid[1]
    assert torch.equal(cos[0], torch.ones_like(cos[0])) and torch.equal(sin[0], torch.zeros_like(sin[0]))
    # Patch rows: only the (0, 0) token has angle 0; every other one is rotated.
    assert (sin[2:].abs().amax(dim=1) > DISTINCT).all()
    torch.testing.assert_close(cos[1:], rope(tiny("rope2d"), grid)[0])


@pytest.mark.parametrize("method", vitpos.POS_REGISTRY["rope2d"].methods)
def test_rope2d_every_method_is_exact_at_training_grid(tiny, method):
    m = tiny("rope2d")
    cos, sin, scale = rope(m, TRAIN, "extrapolate")
    cos_m, sin_m, scale_m = rope(m, TRAIN, method)
    assert torch.equal(cos_m, cos) and torch.equal(sin_m, sin)
    assert scale_m == scale == 1.0


@pytest.mark.parametrize("grid", [(16, 16), (16, 8), (12, 20)])
def test_rope2d_interpolate_scales_positions(tiny, grid):
    m = tiny("rope2d", embed_dim=64)
    q = m.pos.head_dim // 4
    m.pos.method = "extrapolate"
    ext, _ = m.pos.angles(grid)
    m.pos.method = "interpolate"
    itp, _ = m.pos.angles(grid)
    s_y, s_x = grid[0] / TRAIN[0], grid[1] / TRAIN[1]
    torch.testing.assert_close(itp[:, :q], ext[:, :q] / s_x)
    torch.testing.assert_close(itp[:, q:], ext[:, q:] / s_y)
    if grid == (16, 16):  # black box: token (2i, 2j) of the 2x grid turns like (i, j) of the training grid
        cos, sin, _ = rope(m, grid)
        cos_t, sin_t, _ = rope(m, TRAIN, "extrapolate")
        even = (torch.arange(16)[::2, None] * 16 + torch.arange(16)[None, ::2]).flatten()
        torch.testing.assert_close(cos[even], cos_t, **TRIG)
        torch.testing.assert_close(sin[even], sin_t, **TRIG)


@pytest.mark.parametrize("grid", [TRAIN, (6, 6), (4, 8), (8, 5)])
def test_rope2d_ntk_changes_nothing_when_not_larger(tiny, grid):
    m = tiny("rope2d")
    cos, sin, _ = rope(m, grid, "extrapolate")
    cos_n, sin_n, scale = rope(m, grid, "ntk")
    assert torch.equal(cos_n, cos) and torch.equal(sin_n, sin) and scale == 1.0


def test_rope2d_ntk_scales_only_the_larger_axis(tiny):
    m = tiny("rope2d", embed_dim=64)
    q = m.pos.head_dim // 4
    m.pos.method = "extrapolate"
    ext, _ = m.pos.angles((8, 16))
    m.pos.method = "ntk"
    ntk, _ = m.pos.angles((8, 16))
    torch.testing.assert_close(ntk[:, q:], ext[:, q:], rtol=0, atol=0)  # y: not larger
    assert not torch.allclose(ntk[:, :q], ext[:, :q])  # x: twice as long -> base raised
    assert (ntk[:, :q] <= ext[:, :q] + FP64_RTOL).all()  # a larger base only slows rotation


def test_rope2d_ntk_with_smallest_head_dim(tiny):
    """head_dim 4 (one frequency per axis, which is 1 whatever theta) must serve a larger grid."""
    m = tiny("rope2d", embed_dim=16, num_heads=4).eval()
    m.pos.method = "ntk"
    cos, sin, _ = rope(m, (12, 12))
    assert torch.equal(cos, rope(m, (12, 12), "extrapolate")[0])
    with torch.no_grad():
        m.pos.method = "ntk"
        assert torch.isfinite(m(torch.randn(1, 3, 48, 48))).all()


# NTK and YaRN pinned against their formulas, written out independently of vitpos/pos/rope2d.py.
MICRO_ROPE = dict(embed_dim=128, num_heads=4)  # head dim 32: the default model's 8 frequencies per axis


def test_rope2d_ntk_is_a_raised_base(tiny):
    """ntk at a grid s times longer = axial RoPE with theta' = theta * s^(d'/(d'-2)), d' = d/2."""
    m = tiny("rope2d", **MICRO_ROPE)
    d, theta, s = m.pos.head_dim, m.pos.theta, 3.0
    m.pos.method = "ntk"
    fy, fx, _ = m.pos.axis_frequencies((8, 24))
    raised = theta * s ** ((d / 2) / (d / 2 - 2))
    k = torch.arange(d // 4, dtype=torch.float64)
    torch.testing.assert_close(fx, raised ** (-4 * k / d), **FP64)
    torch.testing.assert_close(fy, theta ** (-4 * k / d), **FP64)  # rows: not longer, unchanged
    # what the raised base means: the highest frequency is kept, the lowest slowed by exactly s
    assert fx[0] == 1.0 and fx[-1] == pytest.approx(theta ** (-4 * (d // 4 - 1) / d) / s, rel=FP64_RTOL)


def test_rope2d_yarn_ramp_for_grid_axes(tiny):
    """At 2x the default model's axis (8 tokens, head dim 32, theta 100): pairs that turned through a full
    circle over the trained offsets -7..7 keep their frequency, those that turned through half of one or
    less are interpolated; gamma = clamp((7 f / pi - 1/2) / (1 - 1/2), 0, 1)."""
    m = tiny("rope2d", **MICRO_ROPE)
    d = m.pos.head_dim
    f = 100.0 ** (-4 * torch.arange(d // 4, dtype=torch.float64) / d)
    gamma = ((7 * f / math.pi - 0.5) / 0.5).clamp(0, 1)
    assert gamma[:2].tolist() == [1.0, 1.0] and 0 < gamma[2] < 1 and gamma[3:].abs().sum() == 0
    m.pos.method = "yarn"
    fy, fx, _ = m.pos.axis_frequencies((16, 16))
    expected = gamma * f + (1 - gamma) * f / 2
    torch.testing.assert_close(fx, expected, **FP64)
    torch.testing.assert_close(fy, expected, **FP64)


def test_rope2d_yarn_temperature_modes(tiny):
    axis, tokens = tiny("rope2d"), tiny("rope2d", pos_kwargs={"yarn_temperature": "tokens"})
    for grid, s_axis, s_tokens in [((16, 16), 2.0, 4.0), ((8, 24), 3.0, 3.0), ((12, 16), 2.0, 3.0)]:
        assert rope(axis, grid, "yarn")[2] == pytest.approx((0.1 * math.log(s_axis) + 1) ** 2)
        assert rope(tokens, grid, "yarn")[2] == pytest.approx((0.1 * math.log(s_tokens) + 1) ** 2)
    with pytest.raises(ValueError, match="yarn_temperature"):
        tiny("rope2d", pos_kwargs={"yarn_temperature": "area"})


def test_rope2d_yarn_temperature(tiny):
    m = tiny("rope2d")
    cos, sin, _ = rope(m, TRAIN, "extrapolate")
    cos_y, sin_y, scale = rope(m, TRAIN, "yarn")
    assert torch.equal(cos_y, cos) and torch.equal(sin_y, sin) and scale == 1.0
    assert rope(m, (6, 6), "yarn")[2] == 1.0
    for grid in [(12, 12), (16, 8), (8, 24)]:
        s = max(grid[0] / TRAIN[0], grid[1] / TRAIN[1])
        scale = rope(m, grid, "yarn")[2]
        assert scale > 1.0
        assert scale == pytest.approx((0.1 * math.log(s) + 1) ** 2)
    assert rope(m, (16, 16), "yarn")[2] > rope(m, (12, 12), "yarn")[2]


# ---------------------------------------------------------------------------------------------
# relbias
# ---------------------------------------------------------------------------------------------


def offsets(grid):
    ys, xs = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    return ys[:, None] - ys[None, :], xs[:, None] - xs[None, :]


def brute_index(h, w):
    coords = list(itertools.product(range(h), range(w)))
    idx = torch.empty(h * w, h * w, dtype=torch.long)
    for i, (yi, xi) in enumerate(coords):
        for j, (yj, xj) in enumerate(coords):
            idx[i, j] = (yi - yj + h - 1) * (2 * w - 1) + (xi - xj + w - 1)
    return idx


@pytest.mark.parametrize("method", vitpos.POS_REGISTRY["relbias"].methods)
@pytest.mark.parametrize("grid", [TRAIN, (6, 10), (12, 9)])
def test_relbias_depends_only_on_offset(tiny, grid, method):
    m = tiny("relbias")
    m.pos.method = method
    dy, dx = offsets(grid)
    key = ((dy + grid[0]) * (2 * grid[1] + 1) + dx + grid[1]).flatten()
    for a in m.pos.attn_pos(grid):
        bias = a.bias.detach().flatten(1)  # (heads, N*N)
        assert a.bias.shape == (m.pos.num_heads, grid[0] * grid[1], grid[0] * grid[1])
        k = key.expand_as(bias)
        hi = torch.zeros(bias.shape[0], int(key.max()) + 1).scatter_reduce(1, k, bias, "amax", include_self=False)
        lo = torch.zeros_like(hi).scatter_reduce(1, k, bias, "amin", include_self=False)
        torch.testing.assert_close(hi.gather(1, k), lo.gather(1, k), rtol=0, atol=0)
        assert bias.std() > 0  # not trivially constant


@pytest.mark.parametrize("grid", [(1, 1), (3, 3), (4, 7), (7, 4), (8, 8)])
def test_relative_position_index_brute_force_and_timm(grid):
    idx = relative_position_index(grid)
    assert torch.equal(idx, brute_index(*grid))
    assert torch.equal(idx, gen_relative_position_index(grid))
    # vitpos's own formula (the one clamp uses) is timm's where clamping changes nothing
    assert torch.equal(relative_position_index(grid, clamp=True), gen_relative_position_index(grid))


@pytest.mark.parametrize("method", vitpos.POS_REGISTRY["relbias"].methods)
def test_relbias_training_grid_gathers_the_table(tiny, method):
    m = tiny("relbias")
    m.pos.method = method
    table, table_grid = m.pos.table_for(TRAIN)
    assert table is m.pos.table and table_grid == TRAIN
    idx = brute_index(*TRAIN)
    for layer, a in enumerate(m.pos.attn_pos(TRAIN)):
        torch.testing.assert_close(a.bias, m.pos.table[layer][idx].permute(2, 0, 1), rtol=0, atol=0)


@pytest.mark.parametrize("grid", [(12, 12), (8, 15), (20, 5)])
def test_relbias_clamp_uses_edge_entries_for_far_offsets(tiny, grid):
    m = tiny("relbias")
    m.pos.method = "clamp"
    h, w = TRAIN
    dy, dx = offsets(grid)
    cy, cx = dy.clamp(-(h - 1), h - 1), dx.clamp(-(w - 1), w - 1)
    idx = (cy + h - 1) * (2 * w - 1) + (cx + w - 1)
    train_bias = m.pos.attn_pos(TRAIN)
    for layer, a in enumerate(m.pos.attn_pos(grid)):
        torch.testing.assert_close(a.bias, m.pos.table[layer][idx].permute(2, 0, 1), rtol=0, atol=0)
        # token (last row, col 0) vs (0, 0): offset beyond range -> the trained (h-1, 0) entry
        far = a.bias[:, (grid[0] - 1) * grid[1], 0]
        torch.testing.assert_close(far, train_bias[layer].bias[:, (h - 1) * w, 0], rtol=0, atol=0)


def test_relbias_locality_starts_every_block_from_a_distance_penalty_halving_per_head(tiny):
    """With no noise, the bias at init between two patches is -locality * 2^-h * their distance, in every block;
    with noise, the same penalty underneath it; the default is locality 1, and 0 leaves the noise alone."""
    dy, dx = offsets(TRAIN)
    dist = (dy.square() + dx.square()).double().sqrt()  # (N, N) patch distances
    m = tiny("relbias", pos_kwargs={"locality": 0.5, "init_std": 0.0})
    for a in m.pos.attn_pos(TRAIN):
        want = -0.5 * torch.tensor([1, 0.5, 0.25, 0.125], dtype=torch.float64)[:, None, None] * dist
        torch.testing.assert_close(a.bias.double(), want, rtol=0, atol=1e-6)
    tables = []
    for kwargs in ({"locality": 0}, {"locality": 0.5}, {}, {"locality": 1}):
        torch.manual_seed(0)  # the same noise
        tables.append(tiny("relbias", pos_kwargs=kwargs).pos.table)
    torch.testing.assert_close(tables[1] - tables[0], m.pos.table, rtol=0, atol=1e-6)
    torch.testing.assert_close(tables[2], tables[3], rtol=0, atol=0)
    torch.testing.assert_close(tables[3] - tables[0], 2 * m.pos.table, rtol=0, atol=1e-6)
    assert 0.01 < tables[0].std() < 0.03  # noise alone: trunc-normal, std .02


def test_relbias_resize_keeps_a_constant_table_constant(tiny):
    m = tiny("relbias")
    with torch.no_grad():
        m.pos.table.fill_(0.25)
    for a in m.pos.attn_pos((12, 10)):
        torch.testing.assert_close(a.bias, torch.full_like(a.bias, 0.25))


def test_relbias_gradients_and_cache(tiny, builds):
    m = tiny("relbias").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        m(x)
        misses = builds()
        m(x)
    assert builds() == misses
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    with_grads(m)
    opt.step()
    m.eval()
    misses = builds()
    with torch.no_grad():
        m(x)  # the stepped table: recomputed
        after_step = builds()
        m(x)
    assert after_step > misses
    assert builds() == after_step


# ---------------------------------------------------------------------------------------------
# sincos2d
# ---------------------------------------------------------------------------------------------


def sincos_by_hand(grid, dim, temperature=10000.0):
    q = dim // 4
    w = temperature ** (-torch.arange(q, dtype=torch.float64) / q)
    ys, xs = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    y, x = ys.reshape(-1, 1) * w, xs.reshape(-1, 1) * w
    return torch.cat([torch.sin(y), torch.cos(y), torch.sin(x), torch.cos(x)], dim=1).float()


@pytest.mark.parametrize("grid", [TRAIN, (6, 10), (16, 16)])
def test_sincos2d_formula_bounds_distinct_and_timm(tiny, grid):
    m = tiny("sincos2d")
    m.pos.method = "extrapolate"  # integer positions at every grid (the default interpolates a new one)
    table = m.pos.table_for(grid)[0]
    d = m.pos.dim
    assert table.shape == (grid[0] * grid[1], d)
    assert table.abs().max() <= 1.0
    torch.testing.assert_close(table, sincos_by_hand(grid, d), **TRIG)
    dist = torch.cdist(table.double(), table.double()) + torch.eye(len(table)) * 10
    assert dist.min() > DISTINCT
    q = d // 4
    t = build_sincos2d_pos_embed(list(grid), dim=d)  # [sin_y, sin_x, cos_y, cos_x]
    ours_from_timm = torch.cat([t[:, :q], t[:, 2 * q : 3 * q], t[:, q : 2 * q], t[:, 3 * q :]], dim=1)
    torch.testing.assert_close(table, ours_from_timm, **TIMM_TABLE)


def test_sincos2d_tokens_add_the_table(tiny):
    m = tiny("sincos2d")
    m.pos.method = "extrapolate"
    x = torch.randn(2, 6 * 10, m.pos.dim)
    torch.testing.assert_close(m.pos.tokens(x, (6, 10)), x + sincos_by_hand((6, 10), m.pos.dim))


def test_sincos2d_interpolate(tiny):
    m = tiny("sincos2d")
    ext = m.pos.table_for(TRAIN).clone()
    m.pos.method = "interpolate"
    torch.testing.assert_close(m.pos.table_for(TRAIN), ext, rtol=0, atol=0)
    big = m.pos.table_for((16, 16))[0]
    even = (torch.arange(16)[::2, None] * 16 + torch.arange(16)[None, ::2]).flatten()
    torch.testing.assert_close(big[even], ext[0], **TRIG)  # positions scaled onto the trained range
    m.pos.method = "extrapolate"
    assert not torch.allclose(m.pos.table_for((16, 16))[0], big)


# ---------------------------------------------------------------------------------------------
# learned
# ---------------------------------------------------------------------------------------------


def test_learned_training_grid_is_the_table(tiny):
    m = tiny("learned")
    assert m.pos.table_for(TRAIN) is m.pos.table
    x = torch.randn(2, 64, m.pos.dim)
    torch.testing.assert_close(m.pos.tokens(x, TRAIN), x + m.pos.table, rtol=0, atol=0)


@pytest.mark.parametrize("grid", [(12, 12), (4, 4), (6, 10)])
def test_learned_resample_matches_timm(tiny, grid):
    m = tiny("learned")
    with torch.no_grad():
        ours = m.pos.table_for(grid)
    ref = resample_abs_pos_embed(m.pos.table.detach(), list(grid), list(TRAIN), num_prefix_tokens=0)
    assert ours.shape == (1, grid[0] * grid[1], m.pos.dim)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_learned_resample_is_differentiable(tiny):
    m = tiny("learned").train()
    m(torch.randn(2, 3, 48, 40)).square().mean().backward()
    g = m.pos.table.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0


def test_learned_cache_and_invalidation(tiny, builds):
    m = tiny("learned").eval()
    with torch.no_grad():
        misses = builds()
        first = m.pos.table_for((12, 12))
        second = m.pos.table_for((12, 12))
    assert builds() == misses + 1
    assert second is first
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    with_grads(m, (48, 48))
    opt.step()
    m.eval()
    misses = builds()
    with torch.no_grad():
        third = m.pos.table_for((12, 12))
        assert m.pos.table_for((12, 12)) is third
    assert builds() == misses + 1
    assert not torch.allclose(third, first)
    torch.testing.assert_close(
        third, resample_abs_pos_embed(m.pos.table.detach(), [12, 12], list(TRAIN), num_prefix_tokens=0)
    )
