"""Properties of rope2d-mixed, cpb, peg and the compositions (the registry-wide tests cover the rest)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from helpers import TRAIN, with_grads  # noqa: E402

import vitpos
from vitpos.optim import param_groups
from vitpos.pos import POS_REGISTRY
from vitpos.pos.base import rotate
from vitpos.pos.compose import ComposedPos, merge_attn_pos
from vitpos.pos.cpb import log_offsets_table
from vitpos.pos.rope2d import Rope2dPos

pytestmark = pytest.mark.usefixtures("one_thread")

EXACT = dict(rtol=0, atol=0)  # the same fp32 operations in the same order: bit for bit
TRIG = dict(atol=1e-6, rtol=0)  # fp32 cos/sin (or a table entry) against the same fp32 values taken another way
FP32 = dict(atol=1e-5, rtol=0)  # fp32 cos/sin, biases or phases of order 1 against the same formula computed apart
LOGIT = dict(atol=1e-4, rtol=1e-4)  # logits of random q, k after two fp32 rotations each
MLP = dict(atol=1e-4, rtol=1e-5)  # the log-CPB MLP's fp32 bias against the same MLP evaluated by hand
SLACK = 1e-6  # fp32 rounding at the ends of a range a ratio must stay in
VISIBLY = 1e-3  # what changes an output changes it by at least this
TURNS = 1e-2  # a rotation that does something moves the logits by at least this
SEEN = 1e-5  # an input the model sees moves its logits by more than this
NONE = 1e-3  # attention weight that counts as none at all


def grid_yx(grid):
    ys, xs = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    return ys.flatten(), xs.flatten()


def offset_key(grid):
    """(N*N,) an integer per (dy, dx) offset between tokens of ``grid``."""
    ys, xs = grid_yx(grid)
    dy, dx = ys[:, None] - ys[None, :], xs[:, None] - xs[None, :]
    return ((dy + grid[0]) * (2 * grid[1] + 1) + dx + grid[1]).flatten()


def assert_offset_only(bias, grid):
    """bias (heads, N, N): every pair of tokens with the same offset has the same value."""
    flat = bias.detach().flatten(1)
    k = offset_key(grid).expand_as(flat)
    hi = torch.zeros(flat.shape[0], int(k.max()) + 1).scatter_reduce(1, k, flat, "amax", include_self=False)
    lo = torch.zeros_like(hi).scatter_reduce(1, k, flat, "amin", include_self=False)
    torch.testing.assert_close(hi.gather(1, k), lo.gather(1, k), rtol=0, atol=0)
    assert flat.std() > 0


# ---------------------------------------------------------------------------------------------
# rope2d-mixed
# ---------------------------------------------------------------------------------------------


def mixed_rope(m, grid, method=None):
    """[(cos, sin)] per block, each (heads, N, d/2), and the logit scale."""
    if method is not None:
        m.pos.method = method
    attn = m.pos.attn_pos(grid)
    return [a.rope.unbind(-1) for a in attn], attn[0].logit_scale


def turn(x, cos, sin):
    return rotate(x, torch.stack([cos, sin], dim=-1))


def test_mixed_init_is_a_rotated_axial_ladder(tiny):
    m = tiny("rope2d-mixed", embed_dim=64, depth=3)  # head_dim 16: 8 rotary pairs
    f = m.pos.freqs.detach()  # (depth, heads, d/2, 2)
    d, q = m.pos.head_dim, m.pos.head_dim // 4
    assert f.shape == (3, m.pos.num_heads, d // 2, 2)
    ladder = 10.0 ** (-4.0 * torch.arange(q) / d)
    torch.testing.assert_close(f.norm(dim=-1), torch.cat([ladder, ladder]).expand(3, m.pos.num_heads, -1))
    angle = torch.atan2(f[..., 1], f[..., 0])  # (depth, heads, d/2)
    turn = lambda a: torch.remainder(a + math.pi, 2 * math.pi) - math.pi  # noqa: E731
    torch.testing.assert_close(turn(angle[..., :q] - angle[..., :1]), torch.zeros_like(angle[..., :q]), **FP32)
    torch.testing.assert_close(turn(angle[..., q:] - angle[..., :1]), torch.full_like(angle[..., q:], math.pi / 2))
    assert angle[..., 0].flatten().unique().numel() == 3 * m.pos.num_heads  # a random angle per block and head


def test_mixed_cos_sin_match_the_phase_formula(tiny):
    m = tiny("rope2d-mixed", embed_dim=64)
    with torch.no_grad():
        m.pos.freqs.normal_()  # any learned frequencies, not just the init
    grid = (5, 7)  # not the training grid: `extrapolate` keeps integer positions there, the formula's
    ys, xs = grid_yx(grid)
    ropes, _ = mixed_rope(m, grid, "extrapolate")
    for layer, (cos, sin) in enumerate(ropes):
        f = m.pos.freqs[layer].detach().double()  # (heads, d/2, 2)
        phase = xs.double()[None, :, None] * f[:, None, :, 0] + ys.double()[None, :, None] * f[:, None, :, 1]
        assert cos.shape == (m.pos.num_heads, 35, m.pos.head_dim // 2) and cos.dtype == torch.float32
        torch.testing.assert_close(cos, phase.cos().float(), **FP32)
        torch.testing.assert_close(sin, phase.sin().float(), **FP32)


@pytest.mark.parametrize("big", [(13, 15), (8, 12)])
def test_mixed_logit_depends_only_on_offset_per_head(tiny, big):
    m = tiny("rope2d-mixed", embed_dim=64)
    with torch.no_grad():
        m.pos.freqs.mul_(torch.rand_like(m.pos.freqs) * 3)  # random learned frequencies
    (h, w), (bh, bw) = TRAIN, big
    here_ropes, _ = mixed_rope(m, TRAIN)
    big_ropes, _ = mixed_rope(m, big, "extrapolate")
    heads, n, d = m.pos.num_heads, 128, m.pos.head_dim
    q, k = torch.randn(heads, n, d), torch.randn(heads, n, d)
    y1, y2 = torch.randint(0, h, (2, n))
    x1, x2 = torch.randint(0, w, (2, n))
    a, b = torch.randint(0, bh - h + 1, (n,)), torch.randint(0, bw - w + 1, (n,))

    def logits(cos, sin, width, ya, xa, yb, xb):  # (heads, n): head h of q with head h of k
        i, j = ya * width + xa, yb * width + xb
        return (turn(q, cos[:, i], sin[:, i]) * turn(k, cos[:, j], sin[:, j])).sum(-1)

    for (cos, sin), (cos2, sin2) in zip(here_ropes, big_ropes):
        here = logits(cos, sin, w, y1, x1, y2, x2)
        torch.testing.assert_close(logits(cos2, sin2, bw, y1 + a, x1 + b, y2 + a, x2 + b), here, **LOGIT)
        assert not torch.allclose(here, (q * k).sum(-1), atol=TURNS)  # the rotation does something
    # heads really differ (each has its own frequencies)
    cos0 = here_ropes[0][0]
    assert not torch.allclose(cos0[0], cos0[1])


@pytest.mark.parametrize("method", POS_REGISTRY["rope2d-mixed"].methods)
def test_mixed_rotation_preserves_norms_and_broadcasts_per_head(tiny, method):
    m = tiny("rope2d-mixed")
    grid = (12, 10)
    ropes, _ = mixed_rope(m, grid, method)
    cos, sin = ropes[1]
    x = torch.randn(3, m.pos.num_heads, 120, m.pos.head_dim)
    y = turn(x, cos, sin)  # (heads, N, d/2) against (B, heads, N, d)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    for hd in range(m.pos.num_heads):  # head hd turned by its own angles
        torch.testing.assert_close(y[:, hd], turn(x[:, hd], cos[hd], sin[hd]), **TRIG)
    assert not torch.allclose(y, x)


def test_mixed_frequencies_get_gradients_and_one_computation_per_forward(tiny, builds):
    m = tiny("rope2d-mixed").train()
    x = torch.randn(2, 3, 32, 40)
    misses = builds()
    m(x).square().mean().backward()
    g = m.pos.freqs.grad
    assert g is not None and torch.isfinite(g).all() and (g.abs().flatten(2).sum(-1) > 0).all()  # every block, head
    assert builds() == misses + 1  # one build for all blocks and heads
    m(x).square().mean().backward()
    assert builds() == misses + 2  # training: fresh per forward, never cached


def test_mixed_frequencies_have_no_weight_decay(tiny):
    m = tiny("rope2d-mixed")
    assert m.pos.no_weight_decay() == {"freqs"}
    decay, no_decay = param_groups(m, 0.05, 1e-3)
    assert any(p is m.pos.freqs for p in no_decay["params"])
    assert not any(p is m.pos.freqs for p in decay["params"])


def test_mixed_every_method_at_the_training_grid_is_extrapolate(tiny):
    m = tiny("rope2d-mixed")
    ref, ref_scale = mixed_rope(m, TRAIN, "extrapolate")
    for method in m.pos.methods:
        ropes, scale = mixed_rope(m, TRAIN, method)
        assert scale == ref_scale == 1.0
        for (c, s), (rc, rs) in zip(ropes, ref):
            assert torch.equal(c, rc) and torch.equal(s, rs)


def test_mixed_transfer_methods(tiny):
    m = tiny("rope2d-mixed", embed_dim=64)
    d, q = m.pos.head_dim, m.pos.head_dim // 4
    f = m.pos.freqs.detach()
    # interpolate: token (2i, 2j) of the 2x grid turns like (i, j) of the training grid
    ropes, _ = mixed_rope(m, (16, 16), "interpolate")
    train, _ = mixed_rope(m, TRAIN, "extrapolate")
    even = (torch.arange(16)[::2, None] * 16 + torch.arange(16)[None, ::2]).flatten()
    for (c, s), (tc, ts) in zip(ropes, train):
        torch.testing.assert_close(c[:, even], tc, **FP32)
        torch.testing.assert_close(s[:, even], ts, **FP32)
    # ntk: pair k's component along a longer axis scaled by s^(-(4k/d) d'/(d'-2)); the other axis kept
    m.pos.method = "ntk"
    got, scale = m.pos.frequencies((8, 24))
    e = 4.0 * (torch.arange(d // 2) % q) / d
    torch.testing.assert_close(got[..., 0], f[..., 0] * 3.0 ** (-e * (d / 2) / (d / 2 - 2)))
    torch.testing.assert_close(got[..., 1], f[..., 1], rtol=0, atol=0)
    assert scale == 1.0
    assert torch.equal(m.pos.frequencies((6, 8))[0], f)  # not larger: unchanged
    # yarn: high frequencies kept, low ones interpolated; the temperature of rope2d
    m.pos.method = "yarn"
    got, scale = m.pos.frequencies((16, 16))
    ratio = got / f  # in [1/2, 1] per pair
    assert ratio.min() >= 0.5 - SLACK and ratio.max() <= 1 + SLACK
    turns = (8 - 1) * f.norm(dim=-1) / math.pi  # full circles over the trained offsets -7..7, per pair
    kept, interpolated = turns >= 1, turns <= 0.5
    assert kept.any() and interpolated.any()  # the init ladder spans both ends of the ramp
    torch.testing.assert_close(ratio[..., 0][kept], torch.ones_like(ratio[..., 0][kept]))
    torch.testing.assert_close(ratio[..., 0][interpolated], torch.full_like(ratio[..., 0][interpolated], 0.5))
    assert scale == pytest.approx((0.1 * math.log(2) + 1) ** 2)


def test_mixed_cos_sin_stay_fp32_under_bf16_autocast(tiny):
    m = tiny("rope2d-mixed").train()
    with torch.no_grad():
        m.pos.freqs.mul_(3.0)  # large phases at the far corner of a large grid: bf16 would be off by radians
    grid = (40, 40)
    ref, _ = mixed_rope(m, grid)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ropes, _ = mixed_rope(m, grid)
        out = m(torch.randn(1, 3, 160, 160))
    assert out.dtype == torch.bfloat16
    for (c, s), (rc, rs) in zip(ropes, ref):
        assert c.dtype == s.dtype == torch.float32
        torch.testing.assert_close(c, rc, **FP32)
        torch.testing.assert_close(s, rs, **FP32)


def test_mixed_class_token_is_not_rotated(tiny):
    m = tiny("rope2d-mixed", class_token=True, global_pool="token")
    ropes, _ = mixed_rope(m, (6, 10))
    for cos, sin in ropes:
        assert cos.shape == (m.pos.num_heads, 61, m.pos.head_dim // 2)
        assert (cos[:, 0] == 1).all() and (sin[:, 0] == 0).all()
        assert not (sin[:, 1:] == 0).all()


# ---------------------------------------------------------------------------------------------
# cpb
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("grid", "norm_grid"), [((8, 8), (8, 8)), ((4, 7), (8, 8)), ((12, 10), (8, 8)),
                                                 ((1, 5), (1, 5)), ((5, 1), (8, 8))])  # fmt: skip
def test_cpb_offsets_are_swin_v2s_log_coords(grid, norm_grid):
    """The offsets table (timm's gen_relative_log_coords) against Swin v2's formula written out; a one-row grid
    (normalised by itself) stays finite."""
    h, w = grid
    dy = torch.arange(-(h - 1), h, dtype=torch.float32) / max(norm_grid[0] - 1, 1)
    dx = torch.arange(-(w - 1), w, dtype=torch.float32) / max(norm_grid[1] - 1, 1)
    c = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1).reshape(-1, 2) * 8
    want = torch.sign(c) * torch.log2(c.abs() + 1.0) / math.log2(8)
    torch.testing.assert_close(log_offsets_table(grid, norm_grid), want, **EXACT)


def cpb_by_hand(pos, layer, grid, norm_grid):
    """Swin v2's formula, written out in fp64 for one block: (heads, N, N)."""
    ys, xs = grid_yx(grid)
    dy = (ys[:, None] - ys[None, :]).double() / max(norm_grid[0] - 1, 1) * 8
    dx = (xs[:, None] - xs[None, :]).double() / max(norm_grid[1] - 1, 1) * 8
    c = torch.stack([dy, dx], dim=-1)
    c = torch.sign(c) * torch.log2(c.abs() + 1) / math.log2(8)
    w1, b1, w2 = (p[layer].detach().double() for p in (pos.w1, pos.b1, pos.w2))
    return (16 * torch.sigmoid(torch.relu(c @ w1 + b1) @ w2)).permute(2, 0, 1).float()


def scrambled_cpb(tiny, hidden=16, **kw):
    m = tiny("cpb", pos_kwargs={"cpb_hidden": hidden}, **kw)
    with torch.no_grad():
        for p in m.pos.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return m


@pytest.mark.parametrize("method", POS_REGISTRY["cpb"].methods)
@pytest.mark.parametrize("grid", [TRAIN, (12, 12), (6, 11), (13, 9)])
def test_cpb_finite_offset_only_in_range_and_formula(tiny, grid, method):
    m = scrambled_cpb(tiny, 32)
    m.pos.method = method
    n = grid[0] * grid[1]
    norm = TRAIN if method == "continuous" else grid
    for layer, a in enumerate(m.pos.attn_pos(grid)):
        assert a.bias.shape == (m.pos.num_heads, n, n) and a.rope is None
        assert torch.isfinite(a.bias).all()
        assert (a.bias > 0).all() and (a.bias < 16).all()
        assert_offset_only(a.bias, grid)
        torch.testing.assert_close(a.bias, cpb_by_hand(m.pos, layer, grid, norm), **MLP)


def test_cpb_default_init_starts_near_a_constant_8(tiny):
    m = tiny("cpb")
    assert m.pos.w1.shape[-1] == 512  # Swin v2's hidden width by default
    for a in m.pos.attn_pos(TRAIN):
        torch.testing.assert_close(a.bias, torch.full_like(a.bias, 8.0), atol=0.25, rtol=0)
        assert a.bias.std() > 0


def test_cpb_continuous_extrapolates_and_normalized_rescales(tiny):
    m = scrambled_cpb(tiny)
    train = m.pos.attn_pos(TRAIN)
    big = (12, 12)
    # token (i, j) of the big grid and token (0, 0): the offset is trained when i, j < 8
    inside = torch.tensor([r * 12 + c for r in range(8) for c in range(8)])
    m.pos.method = "continuous"
    for a, t in zip(m.pos.attn_pos(big), train):  # same offsets -> the same bias as at the training grid
        torch.testing.assert_close(a.bias[:, inside, 0], t.bias[:, :, 0], **FP32)
    m.pos.method = "normalized"
    a = m.pos.attn_pos(big)[0]
    assert not torch.allclose(a.bias[:, inside, 0], train[0].bias[:, :, 0], atol=VISIBLY)
    far = a.bias[:, 11 * 12 + 11, 0]  # the largest offset maps where the trained largest did
    torch.testing.assert_close(far, train[0].bias[:, 63, 0], **FP32)


def test_cpb_offsets_table_is_log_spaced_in_index_order():
    t = log_offsets_table((3, 4), (3, 4))
    assert t.shape == (5 * 7, 2)
    row = (1 + 2) * 7 + (-3 + 3)  # (dy, dx) = (1, -3) at index (dy + h-1)(2w-1) + (dx + w-1)
    expect = torch.tensor([1 / 2 * 8, -3 / 3 * 8])
    torch.testing.assert_close(t[row], torch.sign(expect) * torch.log2(expect.abs() + 1) / 3)
    assert t.abs().max() == pytest.approx(math.log2(9) / 3)  # the largest trained offset, 8 before log scaling
    assert (log_offsets_table((1, 1), (1, 1)) == 0).all()  # a 1x1 grid has offset 0 only (no division by 0)


def test_cpb_mlp_gets_gradients_and_training_recomputes(tiny, builds):
    m = tiny("cpb", pos_kwargs={"cpb_hidden": 32}).train()
    x = torch.randn(2, 3, 40, 32)
    m(x).square().mean().backward()
    for name in ("w1", "b1", "w2"):
        g = getattr(m.pos, name).grad
        assert g is not None and torch.isfinite(g).all() and (g.flatten(1).abs().sum(1) > 0).all(), name
    misses = builds()
    m(x)
    assert builds() == misses + 1  # the bias: one fresh MLP evaluation for all blocks
    assert m.pos.no_weight_decay() == {"w1", "b1", "w2"}


@pytest.mark.parametrize("name", ["relbias", "cpb", "relbias+peg"])
@pytest.mark.parametrize("grid", [TRAIN, (6, 9)])
def test_class_token_bias_is_learned_per_block_and_head(tiny, name, grid):
    """Prefix rows and columns come from prefix_bias (prefix -> patch, patch -> prefix, prefix -> prefix);
    the patch block is the bias the scheme computes without a prefix."""
    m = tiny(name, class_token=True, global_pool="token")
    pos = m.pos.parts["relbias"] if name == "relbias+peg" else m.pos
    depth, heads, n = pos.depth, pos.num_heads, grid[0] * grid[1]
    with_grads(m, img=(4 * grid[0], 4 * grid[1]))
    grad = pos.prefix_bias.grad.abs()
    assert (grad[:-1] > 0).all()  # every entry of every block and head learns ...
    assert (grad[-1, :, [0, 2]] > 0).all()  # ... but patch queries of the last block, which token pooling ignores
    assert "prefix_bias" in pos.no_weight_decay()
    with torch.no_grad():
        pos.prefix_bias.copy_(torch.arange(depth * heads * 3, dtype=torch.float32).view(depth, heads, 3) + 100)
    pos.num_prefix_tokens = 0  # the same scheme without the prefix: the patch block
    patch_only = pos.bias(grid)
    pos.num_prefix_tokens = 1
    for layer, a in enumerate(m.pos.attn_pos(grid)):
        b, pb = a.bias, pos.prefix_bias[layer]
        assert b.shape == (heads, n + 1, n + 1)
        torch.testing.assert_close(b[:, 0, 1:], pb[:, 0, None].expand(heads, n))
        torch.testing.assert_close(b[:, 1:, 0], pb[:, 1, None].expand(heads, n))
        torch.testing.assert_close(b[:, 0, 0], pb[:, 2])
        torch.testing.assert_close(b[:, 1:, 1:], patch_only[layer], rtol=0, atol=0)


def test_cpb_class_token_starts_as_an_ordinary_key(tiny):
    """At init a patch query gives the class token about the attention share of a patch (1/(N+1)); a prefix
    padded with 0 against cpb's ~8 between patches would hide it (e^-8 of a patch's share)."""
    m = tiny("cpb", class_token=True, global_pool="token")
    bias = m.pos.attn_pos(TRAIN)[0].bias.detach()  # (heads, 65, 65)
    share = bias[:, 1:].softmax(-1)[..., 0]  # (heads, 64): what each patch query gives the class token
    assert share.mean() == pytest.approx(1 / 65, rel=0.1)
    padded = bias.clone()
    padded[:, 1:, 0] = 0  # the zero-padded prefix: the negative control
    assert padded[:, 1:].softmax(-1)[..., 0].mean() < NONE


# ---------------------------------------------------------------------------------------------
# peg
# ---------------------------------------------------------------------------------------------


def peg_by_hand(pos, x, grid):
    p = pos.num_prefix_tokens
    img = x[:, p:].transpose(1, 2).reshape(x.shape[0], -1, *grid)
    conv = F.conv2d(img, pos.proj.weight, pos.proj.bias, padding=1, groups=pos.dim)
    return torch.cat([x[:, :p], x[:, p:] + conv.flatten(2).transpose(1, 2)], dim=1)


@pytest.mark.parametrize("class_token", [False, True], ids=["avg", "cls"])
@pytest.mark.parametrize("grid", [TRAIN, (12, 12), (5, 11)])
def test_peg_is_a_depthwise_conv_residual_after_block_0(tiny, grid, class_token):
    kw = dict(class_token=True, global_pool="token") if class_token else {}
    pos = tiny("peg", **kw).pos
    x = torch.randn(2, int(class_token) + grid[0] * grid[1], pos.dim)
    out = pos.after_block(x, grid, 0)
    torch.testing.assert_close(out, peg_by_hand(pos, x, grid))
    if class_token:
        assert torch.equal(out[:, 0], x[:, 0])  # the class token passes through
    for i in range(1, pos.depth):
        assert pos.after_block(x, grid, i) is x
    assert pos.tokens(x, grid) is x
    assert all(a.rope is None and a.bias is None for a in pos.attn_pos(grid))


def test_peg_permuting_patches_changes_its_output_and_the_logits(tiny):
    m = tiny("peg").eval()
    pos, grid = m.pos, (6, 10)
    x = torch.randn(1, 60, pos.dim)
    perm = torch.randperm(60)
    # a permutation-equivariant map would give out[perm]; the conv sees neighbours, so it does not
    assert not torch.allclose(pos.after_block(x[:, perm], grid, 0), pos.after_block(x, grid, 0)[:, perm], atol=VISIBLY)
    # zero padding: the same token value at the border and in the middle comes out differently
    const = pos.after_block(torch.ones(1, 60, pos.dim), grid, 0).reshape(6, 10, -1)
    assert not torch.allclose(const[0, 0], const[3, 5])
    torch.testing.assert_close(const[2, 4], const[3, 5])  # interior tokens: translation-equivariant
    images = torch.randn(2, 3, 24, 40)
    swapped = images.clone()
    swapped[..., :4, :4], swapped[..., 8:12, 20:24] = images[..., 8:12, 20:24], images[..., :4, :4]
    with torch.no_grad():
        assert not torch.allclose(m(images), m(swapped), atol=SEEN)


def test_peg_serves_new_grids_and_learns(tiny):
    m = tiny("peg").train()
    for img in [(48, 40), (16, 24)]:
        m.zero_grad()
        out = m(torch.randn(2, 3, *img))
        assert out.shape == (2, 5) and torch.isfinite(out).all()
        out.square().mean().backward()
        assert m.pos.proj.weight.grad.abs().sum() > 0 and m.pos.proj.bias.grad.abs().sum() > 0
    assert m.pos.methods == ("conv", "dilate")
    assert m.pos.no_weight_decay() == {"proj.weight", "proj.bias"}  # as CPVT/Twins: position params not decayed


@pytest.mark.parametrize("k", [(2, 2), (3, 2), (4, 1)], ids=["2x2", "3x2", "4x1"])
def test_peg_dilate_on_a_repeated_grid_is_the_trained_conv_repeated(tiny, k):
    """Zoom by an integer factor, modelled as each token repeated k x k: the dilated kernel sees what the trained
    kernel saw on the training grid, border padding included; the plain kernel does not."""
    pos = tiny("peg", class_token=True, global_pool="token").pos
    h, w = pos.train_grid
    x = torch.randn(2, 1 + h * w, pos.dim)
    up = torch.cat([x[:, :1], rearrange(x[:, 1:], "b (h w) d -> b h w d", h=h)
                    .repeat_interleave(k[0], 1).repeat_interleave(k[1], 2).flatten(1, 2)], dim=1)  # fmt: skip
    big = (h * k[0], w * k[1])
    want = pos.after_block(x, (h, w), 0)
    want = torch.cat([want[:, :1], rearrange(want[:, 1:], "b (h w) d -> b h w d", h=h)
                      .repeat_interleave(k[0], 1).repeat_interleave(k[1], 2).flatten(1, 2)], dim=1)  # fmt: skip
    pos.method = "dilate"
    assert pos.dilation(big) == k and pos.dilation((h, w)) == (1, 1) and pos.dilation((h // 2, w)) == (1, 1)
    torch.testing.assert_close(pos.after_block(up, big, 0), want)
    torch.testing.assert_close(pos.after_block(x, (h, w), 0), peg_by_hand(pos, x, (h, w)))  # no change at home
    pos.method = "conv"
    assert not torch.allclose(pos.after_block(up, big, 0), want, atol=VISIBLY)


def test_peg_dilation_rounds_half_up_per_axis(tiny):
    pos = tiny("peg").pos
    pos.method = "dilate"
    h, w = pos.train_grid
    assert pos.dilation((int(h * 1.5), int(w * 3.5))) == (2, 4)
    assert pos.dilation((int(h * 2.5), int(w * 1.25))) == (3, 1)


# ---------------------------------------------------------------------------------------------
# compositions
# ---------------------------------------------------------------------------------------------


def test_registry_has_the_new_schemes():
    assert {"rope2d-mixed", "cpb", "peg", "rope2d+learned", "rope2d+peg", "relbias+peg"} <= set(vitpos.POS_SCHEMES)
    assert issubclass(POS_REGISTRY["rope2d+learned"], ComposedPos)


@pytest.mark.parametrize("grid", [TRAIN, (12, 10)])
def test_rope2d_plus_learned_has_both_parts(tiny, grid):
    m = tiny("rope2d+learned")
    assert isinstance(m.pos, ComposedPos)
    alone = Rope2dPos(dim=32, num_heads=4, depth=2, grid=TRAIN)
    alone.method = m.pos.parts["rope2d"].method  # the composition's default method for its rotary part
    learned = m.pos.parts["learned"]
    n = grid[0] * grid[1]
    x = torch.randn(2, n, 32)
    with torch.no_grad():
        diff = m.pos.tokens(x, grid) - alone.tokens(x, grid)
        torch.testing.assert_close(diff, learned.table_for(grid).expand_as(x), **TRIG)
    if grid == TRAIN:
        assert torch.equal(m.pos.tokens(x, grid) - x, (x + learned.table) - x)
    for a, b in zip(m.pos.attn_pos(grid), alone.attn_pos(grid)):
        assert a.bias is None and a.logit_scale == b.logit_scale
        assert torch.equal(a.rope, b.rope)
    assert m.no_weight_decay() == {"pos.parts.learned.table"}
    assert {n for n, _ in m.named_parameters() if n.startswith("pos.")} == {"pos.parts.learned.table"}


def test_composition_method_names_round_trip(tiny):
    m = tiny("rope2d+learned")
    cls_methods = POS_REGISTRY["rope2d+learned"].methods
    assert m.pos.methods == cls_methods and set(cls_methods) == {f"{r}+bicubic" for r in Rope2dPos.methods}
    assert m.pos.method == cls_methods[0] == "yarn+bicubic"  # the composition's own default, chosen on validation
    for name in m.pos.methods:
        m.pos.method = name
        assert m.pos.method == name
        assert [p.method for p in m.pos.parts.values()] == name.split("+")
    with pytest.raises(ValueError, match="ntk\\+bicubic"):
        m.pos.method = "ntk"
    m.pos.method = "yarn+bicubic"
    scale = m.pos.attn_pos((16, 16))[0].logit_scale
    assert scale == pytest.approx((0.1 * math.log(2) + 1) ** 2)  # rope2d's temperature comes through
    r = tiny("relbias+peg")
    assert r.pos.methods == tuple(f"{b}+{c}" for b in ("resize", "clamp", "geometric") for c in ("conv", "dilate"))


def test_relbias_plus_peg_combines_bias_and_after_block(tiny):
    m = tiny("relbias+peg")
    relbias, peg = m.pos.parts["relbias"], m.pos.parts["peg"]
    grid = (6, 10)
    for a, b in zip(m.pos.attn_pos(grid), relbias.attn_pos(grid)):
        assert a.rope is None and torch.equal(a.bias, b.bias)
    x = torch.randn(1, 60, 32)
    torch.testing.assert_close(m.pos.after_block(x, grid, 0), peg.after_block(x, grid, 0), rtol=0, atol=0)
    assert m.no_weight_decay() == {f"pos.{n}" for n, _ in m.pos.named_parameters()}


def test_composition_merges_biases_and_rejects_two_ropes():
    registry = {k: v for k, v in POS_REGISTRY.items() if "+" not in k}
    kw = dict(dim=32, num_heads=4, depth=2, grid=TRAIN)
    both = ComposedPos.of("relbias+cpb", registry)(**kw)
    for a, r, c in zip(
        both.attn_pos((5, 6)), both.parts["relbias"].attn_pos((5, 6)), both.parts["cpb"].attn_pos((5, 6))
    ):
        torch.testing.assert_close(a.bias, r.bias + c.bias, rtol=0, atol=0)
    with pytest.raises(ValueError, match="one part"):
        ComposedPos.of("rope2d+rope2d-mixed", registry)(**kw).attn_pos(TRAIN)
    a = merge_attn_pos([vitpos.pos.AttnPos(logit_scale=2.0), vitpos.pos.AttnPos(logit_scale=1.5)])
    assert a.logit_scale == 3.0 and a.rope is None and a.bias is None
    for bad in ("rope2d+rope2d", "rope2d", "rope2d+bogus"):
        with pytest.raises(ValueError):
            ComposedPos.of(bad, registry)


def test_a_composition_may_name_its_own_default_method_and_keeps_every_other():
    registry = {k: v for k, v in POS_REGISTRY.items() if "+" not in k}
    kw = dict(dim=32, num_heads=4, depth=2, grid=TRAIN)
    joined = ComposedPos.of("rope2d+learned", registry)
    assert joined.methods[0] == "interpolate+bicubic"  # the parts' defaults
    own = ComposedPos.of("rope2d+learned", registry, default="yarn+bicubic")
    assert own.methods[0] == "yarn+bicubic" and sorted(own.methods) == sorted(joined.methods)
    built = own(**kw)
    assert built.method == "yarn+bicubic" and built.parts["rope2d"].method == "yarn"
    assert built.parts["learned"].method == "bicubic"
    with pytest.raises(ValueError, match="default method 'yarn' is none of"):
        ComposedPos.of("rope2d+learned", registry, default="yarn")


def test_composition_routes_part_kwargs(tiny):
    m = tiny("rope2d+learned", pos_kwargs={"rope2d": {"theta": 10.0}, "learned": {"init_std": 0.5}})
    assert m.pos.parts["rope2d"].theta == 10.0
    assert m.pos.parts["learned"].table.std() > 0.2
    with pytest.raises(ValueError, match="unknown keyword"):
        tiny("rope2d+learned", pos_kwargs={"theta": 10.0})
