"""The one ViT, parametrized over every position scheme and stem in the registries."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

import vitpos
from vitpos.pos.base import PosScheme

pytestmark = pytest.mark.usefixtures("one_thread")

IMAGES = [(32, 32), (48, 48), (32, 48), (24, 40), (16, 16)]  # training, larger, non-square, smaller
# schemes (alone or composed) that add a logit bias
BIAS_SCHEMES = {"relbias", "cpb", "alibi2d", "lookhere", "fire", "pape"}
SCHEME_METHODS = [(name, m) for name, cls in vitpos.POS_REGISTRY.items() for m in cls.methods]

EXACT = dict(rtol=0, atol=0)  # one computation reached two ways: bit for bit
FP64_INVARIANT = dict(rtol=0, atol=1e-10)  # fp64 logits of an invariant model agree to ~1e-15; room for summation order
VISIBLE = 1e-6  # relative logit change that counts as "position seen": fp64 noise is ~1e-15, real effects >> 1e-4


def finite_nonzero_grad(p: torch.Tensor) -> bool:
    return p.grad is not None and bool(torch.isfinite(p.grad).all()) and bool(p.grad.abs().sum() > 0)


# ---------------------------------------------------------------------------------------------
# every scheme x stem x grid
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("img", IMAGES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("stem", vitpos.STEMS)
@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_forward_backward_at_every_grid(tiny, name, stem, img):
    m = tiny(name, stem=stem).train()
    out = m(torch.randn(2, 3, *img))
    assert out.shape == (2, 5)
    out.square().mean().backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert finite_nonzero_grad(m.stem[0].weight)


@pytest.mark.parametrize("stem", vitpos.STEMS)
@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_gradients_reach_every_position_parameter(tiny, name, stem):
    m = tiny(name, stem=stem).train()
    m(torch.randn(2, 3, 32, 32)).square().mean().backward()
    params = dict(m.pos.named_parameters())
    missing = [n for n, p in params.items() if not finite_nonzero_grad(p)]
    assert not missing
    # and every parameter under pos. is exactly what the scheme owns
    assert {n for n, _ in m.named_parameters() if n.startswith("pos.")} == {f"pos.{n}" for n in params}


MULTI_METHOD = [name for name, cls in vitpos.POS_REGISTRY.items() if len(cls.methods) > 1]
NEW_GRIDS = [(48, 48), (32, 48)]  # 12x12 (both axes beyond the trained 8) and 8x12 (one axis)


@pytest.mark.parametrize("img", NEW_GRIDS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", MULTI_METHOD)
def test_every_method_is_applied_at_a_new_grid(tiny, name, img):
    """At a grid beyond the trained one each transfer method changes the logits in its own way: a method that
    was ignored (or fell back to another) would give the same logits as the one it fell back to."""
    m = scrambled(tiny(name))  # fp64, every weight random: no zero init hides what a method does
    x = torch.randn(2, 3, *img, dtype=torch.float64)
    outs = {}
    with torch.no_grad():
        for method in m.pos.methods:
            m.pos.method = method
            outs[method] = m(x)
            assert torch.isfinite(outs[method]).all()
    size = max(1.0, max(float(o.abs().max()) for o in outs.values()))
    same = [(a, b) for a, b in itertools.combinations(outs, 2) if (outs[a] - outs[b]).abs().max() <= VISIBLE * size]
    assert not same


@pytest.mark.parametrize(("name", "method"), SCHEME_METHODS)
def test_every_method_serves_smaller_and_non_square_grids(tiny, name, method):
    """Below the trained grid methods may coincide (nothing to extrapolate); each must still run and stay finite."""
    m = tiny(name).eval()
    m.pos.method = method
    with torch.no_grad():
        for img in [(16, 16), (24, 40)]:
            assert torch.isfinite(m(torch.randn(2, 3, *img))).all()


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_methods_agree_at_the_training_grid(tiny, name):
    m = tiny(name).eval()
    x = torch.randn(2, 3, 32, 32)
    outs = []
    with torch.no_grad():
        for method in m.pos.methods:
            m.pos.method = method
            outs.append(m(x))
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], **EXACT)


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_class_token_with_token_pool_at_every_grid(tiny, name):
    m = tiny(name, class_token=True, global_pool="token")
    assert m.num_prefix_tokens == 1 and m.pos.num_prefix_tokens == 1
    for img in IMAGES:
        m.train()
        out = m(torch.randn(2, 3, *img))
        assert out.shape == (2, 5)
        out.square().mean().backward()
        assert finite_nonzero_grad(m.cls_token)
        m.zero_grad()
        m.eval()
        for method in m.pos.methods:
            m.pos.method = method
            with torch.no_grad():
                assert torch.isfinite(m(torch.randn(2, 3, *img))).all()
        m.pos.method = m.pos.methods[0]


# ---------------------------------------------------------------------------------------------
# permutation of patches: only `none` with the patch stem is blind to it
# ---------------------------------------------------------------------------------------------


def permute_patches(images: torch.Tensor, perm: torch.Tensor, p: int = 4) -> torch.Tensor:
    h = images.shape[-2] // p
    t = rearrange(images, "b c (h p1) (w p2) -> b (h w) c p1 p2", p1=p, p2=p)
    return rearrange(t[:, perm], "b (h w) c p1 p2 -> b c (h p1) (w p2)", h=h)


def scrambled(model: vitpos.ViT) -> vitpos.ViT:
    """fp64, eval, and weights large enough that position visibly changes the logits."""
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model


def logits_before_after_permutation(model, img):
    x = torch.randn(2, 3, *img, dtype=torch.float64)
    n = (img[0] // 4) * (img[1] // 4)
    perm = torch.roll(torch.randperm(n), 1)
    assert not torch.equal(perm, torch.arange(n))
    with torch.no_grad():
        return model(x), model(permute_patches(x, perm))


def test_permute_patches_is_a_patch_permutation():
    x = torch.randn(1, 3, 8, 12)
    perm = torch.tensor([5, 0, 1, 2, 3, 4])
    y = permute_patches(x, perm)
    assert torch.equal(y[..., :4, :4], x[..., 4:8, 8:12])  # patch 0 of y is patch 5 of x
    assert torch.equal(permute_patches(y, torch.argsort(perm)), x)


@pytest.mark.parametrize("img", [(32, 32), (24, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("class_token", [False, True], ids=["avg", "cls"])
def test_none_with_patch_stem_is_permutation_invariant(tiny, class_token, img):
    kw = dict(class_token=True, global_pool="token") if class_token else {}
    a, b = logits_before_after_permutation(scrambled(tiny("none", **kw)), img)
    torch.testing.assert_close(a, b, **FP64_INVARIANT)
    assert a.abs().max() > 1e-2  # not trivially zero


@pytest.mark.parametrize("img", [(32, 32), (24, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("class_token", [False, True], ids=["avg", "cls"])
@pytest.mark.parametrize(
    ("name", "stem"),
    [(n, s) for n in vitpos.POS_SCHEMES for s in vitpos.STEMS if (n, s) != ("none", "patch")],
)
def test_every_other_scheme_sees_position(tiny, name, stem, class_token, img):
    kw = dict(class_token=True, global_pool="token") if class_token else {}
    a, b = logits_before_after_permutation(scrambled(tiny(name, stem=stem, **kw)), img)
    # a class token only sees relbias second-hand (a small effect, still far above fp64 noise)
    assert (a - b).abs().max() > VISIBLE * max(1.0, float(a.abs().max()))


# ---------------------------------------------------------------------------------------------
# create_model and the registry
# ---------------------------------------------------------------------------------------------


def test_registry_holds_the_five_schemes():
    assert {"learned", "sincos2d", "rope2d", "relbias", "none"} <= set(vitpos.POS_SCHEMES)
    # every entry, compositions ("a+b") included, is a scheme class carrying its methods
    assert all(issubclass(c, PosScheme) and c.methods for c in vitpos.POS_REGISTRY.values())
    assert {"patch", "conv"} <= set(vitpos.STEMS)


def test_unknown_pos_or_stem_lists_the_valid_names(tiny):
    with pytest.raises(ValueError) as e:
        tiny("bogus")
    assert all(name in str(e.value) for name in vitpos.POS_SCHEMES)
    with pytest.raises(ValueError) as e:
        tiny("none", stem="bogus")
    assert all(name in str(e.value) for name in vitpos.STEMS)


def test_patch_size_must_divide_the_image(tiny):
    with pytest.raises(ValueError, match="patch size"):
        tiny("none", img_size=30)
    m = tiny("none")
    with pytest.raises(ValueError, match="patch size"):
        m(torch.randn(1, 3, 32, 30))


@pytest.mark.parametrize("class_token", [False, True])
@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_no_weight_decay_covers_every_position_parameter(tiny, name, class_token):
    kw = dict(class_token=True, global_pool="token") if class_token else {}
    m = tiny(name, **kw)
    pos_names = {n for n, _ in m.named_parameters() if n.startswith("pos.")}
    nwd = m.no_weight_decay()
    assert pos_names <= nwd
    assert nwd <= {n for n, _ in m.named_parameters()}  # names real parameters only
    assert ("cls_token" in nwd) == class_token


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_pos_lr_scale_applies_to_every_position_parameter_alike(tiny, name):
    """One rule for every scheme: exactly the parameters under ``pos.`` get lr x scale; the rest lr; the
    decay split is unchanged. At scale 1 the two plain groups of earlier checkpoints come back."""
    from vitpos.optim import param_groups

    m = tiny(name, class_token=True, global_pool="token")
    name_of = {id(p): n for n, p in m.named_parameters()}
    plain = param_groups(m, 0.05, 1e-3)
    assert len(plain) == 2 and all(g["lr"] == 1e-3 for g in plain)
    groups = param_groups(m, 0.05, 1e-3, pos_lr_scale=30.0)
    lr_of = {name_of[id(p)]: g["lr"] for g in groups for p in g["params"]}
    wd_of = {name_of[id(p)]: g["weight_decay"] for g in groups for p in g["params"]}
    assert set(lr_of) == set(name_of.values())  # every parameter once
    for n in name_of.values():
        assert lr_of[n] == pytest.approx(30e-3 if n.startswith("pos.") else 1e-3), n
    assert wd_of == {name_of[id(p)]: g["weight_decay"] for g in plain for p in g["params"]}
    assert (len(groups) > 2) == any(n.startswith("pos.") for n in name_of.values())


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_pos_weight_decay_applies_to_the_position_parameters_only(tiny, name):
    """``pos_weight_decay`` sets the decay of exactly the parameters under ``pos.`` (at scale 1 too); every
    other parameter keeps its plain group's decay and learning rate."""
    from vitpos.optim import param_groups

    m = tiny(name, class_token=True, global_pool="token")
    name_of = {id(p): n for n, p in m.named_parameters()}
    plain = {name_of[id(p)]: (g["lr"], g["weight_decay"]) for g in param_groups(m, 0.05, 1e-3) for p in g["params"]}
    for scale in (1.0, 30.0):
        groups = param_groups(m, 0.05, 1e-3, pos_lr_scale=scale, pos_weight_decay=0.7)
        got = {name_of[id(p)]: (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
        assert set(got) == set(plain)
        for n, (lr, wd) in got.items():
            assert (lr, wd) == (pytest.approx(scale * 1e-3), 0.7) if n.startswith("pos.") else plain[n], n


# ---------------------------------------------------------------------------------------------
# the SDPA path
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(8, 8), (6, 10)])
@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_only_a_bias_scheme_passes_an_attn_mask(tiny, name, grid, monkeypatch):
    m = tiny(name).eval()
    n = grid[0] * grid[1]
    attn = m.pos.attn_pos(grid)
    assert len(attn) == len(m.blocks)
    for a in attn:
        if set(name.split("+")) & BIAS_SCHEMES:
            assert a.bias is not None and a.bias.shape == (m.pos.num_heads, n, n)
        else:
            assert a.bias is None

    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        seen.append((attn_mask, kw.get("scale")))
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        m(torch.randn(1, 3, grid[0] * 4, grid[1] * 4))
    assert len(seen) == len(m.blocks)
    for (mask, scale), a in zip(seen, attn):
        assert scale == pytest.approx(a.logit_scale * m.pos.head_dim**-0.5)
        if a.bias is None:
            assert mask is None
        else:  # 4-D, as the CPU flash kernel needs
            assert mask.shape == (1, *a.bias.shape)
            torch.testing.assert_close(mask[0], a.bias, **EXACT)


def test_yarn_temperature_reaches_sdpa(tiny, monkeypatch):
    m = tiny("rope2d").eval()
    m.pos.method = "yarn"
    scales = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        scales.append(kw["scale"])
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        m(torch.randn(1, 3, 64, 64))
    expected = m.pos.attn_pos((16, 16))[0].logit_scale * m.pos.head_dim**-0.5
    assert expected > m.pos.head_dim**-0.5
    assert scales == [pytest.approx(expected)] * len(m.blocks)


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_grayscale_input_through_every_scheme(pos, tiny):
    """One input channel (Fashion-MNIST, digits): 28 px, patch 4 -> a 7x7 grid, and 20/36 px at test time."""
    for stem in vitpos.STEMS:
        m = tiny(pos, stem=stem, in_chans=1, img_size=28).eval()
        for side in (20, 28, 36):
            out = m(torch.randn(2, 1, side, side))
            assert out.shape == (2, 5) and torch.isfinite(out).all()
        with pytest.raises(RuntimeError):
            m(torch.randn(2, 3, 28, 28))  # a 1-channel model refuses RGB rather than guessing
