"""Scaled dot-product attention with an optional additive logit bias, fused wherever possible.

SDPA covers every case but one on the CPU: a bias that needs a gradient (relbias, cpb). There SDPA
has no fused kernel and runs its math path, which writes the (B, heads, N, N) logits and
probabilities to memory several times and keeps them for the backward pass. On this memory-bound
work that costs more than the attention itself. :class:`LearnedBiasAttention` instead

* runs the fused (flash) CPU kernel forward, the bias passed as a fixed mask, and keeps only its
  output and log-sum-exp (no N x N tensor is saved);
* in backward, recomputes the probabilities a few batch items at a time, small enough to stay in
  cache, and gets dq, dk, dv and the bias gradient (summed over the batch) from them together.

Two details keep the fused kernels in play: a mask is handed over as (1, heads, N, N), because the
CPU flash kernel takes 2-D or 4-D masks only, and no mask at all is passed when there is no bias.

While ``torch.export`` traces the model, attention is spelled out as matmul, softmax, matmul instead
(:func:`spelled_out`), the form the ONNX exporter needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .compat.torch import FLASH_CPU

CHUNK_BYTES = 4 << 20  # probabilities recomputed per backward chunk: a few MiB, about a core's share of cache


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, scale: float | None = None) -> Tensor:
    """softmax(q k^T * scale + bias) v for q, k, v (B, heads, N, d) and bias (heads, N, N) or None."""
    if torch.compiler.is_exporting():
        return spelled_out(q, k, v, bias, scale)
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    bias = bias.to(q.dtype)
    if (
        FLASH_CPU is not None
        and bias.requires_grad
        and torch.is_grad_enabled()
        and q.device.type == "cpu"
        and q.dtype == torch.float32
        and bias.dim() == 3
        and not torch.compiler.is_compiling()  # inductor writes its own attention kernel
    ):
        return LearnedBiasAttention.apply(q, k, v, bias, q.shape[-1] ** -0.5 if scale is None else scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None] if bias.dim() == 3 else bias, scale=scale)


def spelled_out(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, scale: float | None = None) -> Tensor:
    """The same attention as matmul, softmax, matmul: what ``torch.export`` traces.

    Kept whole, SDPA with a dynamic-size mask (relbias, cpb) gets one output layout when the ONNX exporter
    decomposes the graph and another when its type-promotion pass re-runs it, and the reshape after attention
    fails there; below opset 23 ONNX has no attention operator, so the exporter would write these three ops
    anyway. Tracing them directly spares a decomposition pass over the exported program (a full retrace with
    symbolic shapes, a third of an export's time)."""
    logits = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        logits = logits + bias.to(q.dtype)
    return torch.matmul(logits.softmax(-1), v)


class LearnedBiasAttention(torch.autograd.Function):
    """Attention with a learned (heads, N, N) bias on the CPU: fused forward, chunked recomputing backward."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
        out, lse = FLASH_CPU(q, k, v, attn_mask=bias[None], scale=scale)  # lse: (B, heads, N)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        q, k, v, bias, out, lse = ctx.saved_tensors
        # q, k, v are strided views of the qkv projection: one copy each here, instead of one per chunk and
        # use (a batched matmul copies a non-contiguous operand)
        q, k, v, grad = (t.contiguous() for t in (q, k, v, grad))
        s = ctx.scale
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dbias = torch.zeros_like(bias)
        delta = (grad * out).sum(-1, keepdim=True)  # (B, heads, N, 1): row sums of dP * P
        heads, n, m = bias.shape
        rows = max(1, CHUNK_BYTES // (heads * n * m * q.element_size()))
        for i in range(0, q.shape[0], rows):
            b = slice(i, i + rows)
            # P = exp(q k^T s + bias - lse), exactly the forward's probabilities
            p = torch.matmul(q[b], k[b].transpose(-1, -2)).mul_(s).add_(bias).sub_(lse[b, ..., None]).exp_()
            torch.matmul(p.transpose(-1, -2), grad[b], out=dv[b])
            ds = torch.matmul(grad[b], v[b].transpose(-1, -2)).sub_(delta[b]).mul_(p)  # dS = P (dP - delta)
            dbias += ds.sum(0)
            torch.matmul(ds, k[b], out=dq[b]).mul_(s)
            torch.matmul(ds.transpose(-1, -2), q[b], out=dk[b]).mul_(s)
        return dq, dk, dv, dbias, None
