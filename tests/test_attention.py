"""vitpos.attention: the learned-bias CPU path computes SDPA's attention and gradients, without N x N memory."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

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
