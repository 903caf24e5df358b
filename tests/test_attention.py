"""vitpos.attention: the learned-bias CPU path computes SDPA's attention and gradients, without N x N memory."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import vitpos
import vitpos.attention
from vitpos.attention import attention

pytestmark = pytest.mark.usefixtures("one_thread")

FP32 = dict(atol=1e-5, rtol=1e-5)  # fp32 attention output against the fp64 definition
FP32_GRAD = dict(atol=1e-4, rtol=1e-4)  # its gradients (sums over n keys in another order)


def qkv_views(b: int, heads: int, n: int, d: int, dtype=torch.float32):
    """q, k, v as the model makes them: strided views of one (B, N, 3 heads d) projection."""
    qkv = torch.randn(b, n, 3 * heads * d, dtype=dtype, requires_grad=True)
    q, k, v = qkv.unflatten(-1, (3, heads, d)).permute(2, 0, 3, 1, 4)
    return qkv, q, k, v


def reference(q, k, v, bias, scale):
    """The definition, in fp64."""
    logits = q.double() @ k.double().transpose(-1, -2) * scale + bias.double()
    return logits.softmax(-1) @ v.double()


@pytest.mark.parametrize("b,heads,n,d", [(5, 3, 37, 16), (2, 1, 64, 8), (7, 2, 10, 32)])
@pytest.mark.parametrize("scale", [None, 0.37])
def test_learned_bias_path_matches_the_definition_and_its_gradients(monkeypatch, b, heads, n, d, scale):
    monkeypatch.setattr(vitpos.attention, "CHUNK_BYTES", 2 * heads * n * n * 4)  # 2 items a chunk, ragged last
    qkv, q, k, v = qkv_views(b, heads, n, d)
    table = torch.randn(heads, n, n, requires_grad=True)
    bias = table * 1.5  # a bias computed from a parameter, as the schemes hand it over
    out = attention(q, k, v, bias, scale)
    s = d**-0.5 if scale is None else scale
    ref = reference(q, k, v, bias, s)
    torch.testing.assert_close(out.double(), ref, **FP32)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (qkv, table), g, retain_graph=True)  # the two graphs share bias and q, k, v
    want = torch.autograd.grad(ref, (qkv, table), g.double())
    for a, w in zip(got, want):
        torch.testing.assert_close(a.double(), w.double(), **FP32_GRAD)


def test_learned_bias_path_is_the_one_taken_and_keeps_no_n_by_n_tensor():
    b, heads, n, d = 4, 2, 48, 16
    _, q, k, v = qkv_views(b, heads, n, d)
    bias = torch.randn(heads, n, n, requires_grad=True) * 1

    def largest_saved(fn) -> int:
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            fn()
        return max(sizes)

    ours = largest_saved(lambda: attention(q, k, v, bias))
    sdpa = largest_saved(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    assert sdpa >= b * heads * n * n  # SDPA's math path keeps the probabilities for backward
    assert ours < b * heads * n * n  # this path keeps q, k, v, the output, the bias and the log-sum-exp
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        out = attention(q, k, v, bias)
    assert out.grad_fn.name() == "LearnedBiasAttentionBackward"


@pytest.mark.parametrize("case", ["no bias", "fixed bias", "no grad", "fp64"])
def test_other_cases_go_to_sdpa_and_agree(case):
    b, heads, n, d = 3, 2, 20, 8
    dtype = torch.float64 if case == "fp64" else torch.float32
    _, q, k, v = qkv_views(b, heads, n, d, dtype)
    bias = None if case == "no bias" else torch.randn(heads, n, n, dtype=dtype, requires_grad=case != "fixed bias")
    with torch.set_grad_enabled(case != "no grad"):
        out = attention(q, k, v, bias)
        assert out.grad_fn is None or out.grad_fn.name() != "LearnedBiasAttentionBackward"
    zero = torch.zeros(heads, n, n, dtype=dtype)
    torch.testing.assert_close(out.double(), reference(q, k, v, zero if bias is None else bias, d**-0.5), **FP32)


# -- FlexAttention ---------------------------------------------------------------------------------------------

SMALL = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def biased(name: str, **kw) -> bool:
    m = vitpos.create_model(name, **SMALL, **kw)
    return any(p.bias is not None for p in m.pos.attn_pos(m.grid))


BIASED = [n for n in vitpos.POS_SCHEMES if biased(n)]


def test_the_bias_schemes_are_the_ones_flex_serves():
    assert {"relbias", "cpb", "alibi2d", "lookhere"} <= set(BIASED)
    assert not {"learned", "sincos2d", "rope2d", "none"} & set(BIASED)


@pytest.mark.parametrize("class_token", [False, True], ids=["no-prefix", "class-token"])
@pytest.mark.parametrize("name", BIASED)
def test_flex_kernel_computes_the_sdpa_model_on_seen_and_unseen_grids(name, class_token, monkeypatch):
    """Every bias scheme, on FlexAttention (CPU inference: its eager reference), gives the SDPA model's logits on
    the training grid, a larger one and a non-square one; a masking scheme hands a block mask over only then."""
    calls = []
    flex = vitpos.attention.flex
    monkeypatch.setattr(vitpos.attention, "flex", lambda *a: calls.append(1) or flex(*a))
    torch.manual_seed(0)
    m = vitpos.create_model(name, **SMALL, class_token=class_token).eval()
    for hw in ((16, 16), (24, 24), (16, 28)):
        x = torch.randn(2, 3, *hw)
        with torch.no_grad():
            dense = m(x)
            with vitpos.attention.attention_kernel("flex"):
                masks = [p.block_mask for p in m.pos.attn_pos(m.grid_for(hw))]
                out = m(x)
        torch.testing.assert_close(out, dense, **FP32)
        assert len(calls) == len(m.blocks)  # every block's attention went to FlexAttention
        calls.clear()
        assert all((mask is not None) == (name == "lookhere") for mask in masks), masks
    assert all(p.block_mask is None for p in m.pos.attn_pos(m.grid))  # SDPA again outside the block


def test_lookhere_block_mask_skips_the_blocks_no_head_sees():
    """LH-180 on a 16 x 16 grid: each head sees half of the keys, so its block mask drops key blocks (two of the
    four 128-token blocks of a query block lie wholly outside a half-plane for some query blocks)."""
    m = vitpos.create_model("lookhere", img_size=64, patch_size=4, embed_dim=32, depth=1, num_heads=4)
    with torch.no_grad(), vitpos.attention.attention_kernel("flex"):
        mask = m.pos.attn_pos(m.grid)[0].block_mask
    dense_blocks = mask.to_dense()  # (1, heads, query blocks, key blocks)
    assert dense_blocks.shape[1:] == (4, 2, 2) and not dense_blocks.all() and dense_blocks.any(-1).all()


def test_kernel_choice(monkeypatch):
    """auto: SDPA on the CPU, and on CUDA below the crossover (none set: everywhere); flex on the CPU serves inference
    only (FlexAttention has no CPU backward); a bad name is refused."""
    from vitpos.attention import attention_kernel, uses_flex

    assert vitpos.attention.FLEX_FROM_TOKENS is None  # no measurement has set it: SDPA at every size
    assert not uses_flex("cpu", 10**6) and not uses_flex("cuda", 10**6)
    monkeypatch.setattr(vitpos.attention, "FLEX_FROM_TOKENS", 576)
    assert not uses_flex("cuda", 575) and uses_flex("cuda", 576) and not uses_flex("cpu", 1024)
    with attention_kernel("flex"):
        assert uses_flex("cuda", 4) and not uses_flex("cpu", 4)  # grad enabled here
        with torch.no_grad():
            assert uses_flex("cpu", 4)
        with attention_kernel("sdpa"):
            assert not uses_flex("cuda", 4096)
    with pytest.raises(ValueError, match="unknown attention kernel 'fast'"), attention_kernel("fast"):
        pass


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
BF16 = dict(atol=2e-2, rtol=2e-2)


@cuda
@pytest.mark.parametrize("name", BIASED)
def test_cuda_flex_matches_dense_sdpa_forward_and_backward_in_bf16(name):
    """On CUDA in bf16, the flex path's output and every gradient (the learned bias tables' included) match the
    dense-bias SDPA path's, on the training grid and an unseen non-square one."""
    torch.manual_seed(0)
    m = vitpos.create_model(name, img_size=64, patch_size=8, embed_dim=128, depth=2, num_heads=2).cuda()
    for hw in ((64, 64), (80, 96)):
        x = torch.randn(4, 3, *hw, device="cuda")
        runs = []
        for kernel in ("sdpa", "flex"):
            m.zero_grad(set_to_none=True)
            with vitpos.attention.attention_kernel(kernel), torch.autocast("cuda", dtype=torch.bfloat16):
                out = m(x)
            out.float().square().mean().backward()
            runs.append((out.float(), {n: p.grad.float().clone() for n, p in m.named_parameters()}))
        (dense, dense_grads), (out, grads) = runs
        torch.testing.assert_close(out, dense, **BF16)
        for n, g in grads.items():
            torch.testing.assert_close(g, dense_grads[n], **BF16, msg=lambda s, n=n: f"{n}: {s}")
