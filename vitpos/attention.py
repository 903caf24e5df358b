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

On CUDA a bias can also go to FlexAttention (:func:`attention_kernel`): the bias is read inside the kernel by a
``score_mod``, and a scheme that masks (lookhere) hands over a block mask, so that key blocks a query block cannot
see are skipped. Which of the two is faster for each bias scheme and grid is what ``benchmarks/attention.py``
measures; ``auto`` takes FlexAttention from the measured crossover (:data:`FLEX_FROM_TOKENS`), and until a
measurement sets it, SDPA everywhere.

While ``torch.export`` traces the model, attention is spelled out as matmul, softmax, matmul instead
(:func:`spelled_out`), the form the ONNX exporter needs.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .compat.torch import FLASH_CPU

CHUNK_BYTES = 4 << 20  # probabilities recomputed per backward chunk: a few MiB, about a core's share of cache

# The kernels a biased attention can run on. "auto": FlexAttention on CUDA from FLEX_FROM_TOKENS tokens up, else SDPA.
KERNELS = ("auto", "sdpa", "flex")
# auto's crossover on CUDA, in tokens (None: SDPA at every size); set from benchmarks/attention.py's crossovers
FLEX_FROM_TOKENS: int | None = None
_kernel = "auto"


@contextlib.contextmanager
def attention_kernel(name: str) -> Iterator[None]:
    """Within the block, attention with a bias runs on ``name``: "sdpa" (the bias as a dense mask), "flex"
    (FlexAttention; on the CPU for inference only, as it has no CPU backward) or "auto"."""
    global _kernel
    if name not in KERNELS:
        raise ValueError(f"unknown attention kernel '{name}'; valid: {', '.join(KERNELS)}")
    before, _kernel = _kernel, name
    try:
        yield
    finally:
        _kernel = before


def uses_flex(device: torch.device | str | None, tokens: int) -> bool:
    """Whether a biased attention over ``tokens`` tokens on ``device`` runs on FlexAttention now (a masking scheme
    builds its block mask only then)."""
    device = torch.device(device or "cpu")
    if _kernel == "auto":
        return device.type == "cuda" and FLEX_FROM_TOKENS is not None and tokens >= FLEX_FROM_TOKENS
    return _kernel == "flex" and (device.type == "cuda" or not torch.is_grad_enabled())


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, scale: float | None = None,
              block_mask: object | None = None) -> Tensor:  # fmt: skip
    """softmax(q k^T * scale + bias) v for q, k, v (B, heads, N, d) and bias (heads, N, N) or None. ``block_mask``:
    FlexAttention's BlockMask of the keys each query may see, where the bias masks (-inf) and the flex kernel runs."""
    if torch.compiler.is_exporting():
        return spelled_out(q, k, v, bias, scale)
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    if uses_flex(q.device, q.shape[-2]):
        return flex(q, k, v, bias, scale, block_mask)
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


def flex(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float | None = None,
         block_mask: object | None = None) -> Tensor:  # fmt: skip
    """Biased attention on FlexAttention: the (heads, N, N) bias added to each logit inside the kernel (it is never
    broadcast over the batch), its gradient accumulated there; key blocks outside ``block_mask`` are skipped."""

    def add_bias(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        return score + bias[h, i, j]

    return flex_kernel(q.device.type)(q, k, v, score_mod=add_bias, block_mask=block_mask, scale=scale)


@functools.cache
def flex_kernel(device_type: str):
    """FlexAttention for ``device_type``: compiled on CUDA (its only fast form), eager elsewhere (an unfused
    reference that serves the CPU's inference and tests; its warning says so, and is silenced here)."""
    from torch.nn.attention.flex_attention import flex_attention as kernel

    if device_type == "cuda":
        return torch.compile(kernel, dynamic=False)

    def eager(*args, **kwargs) -> Tensor:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
            return kernel(*args, **kwargs)

    return eager


def block_mask_of(visible: Tensor):
    """FlexAttention's BlockMask for a boolean (heads, N, N) of the keys each query sees."""
    from torch.nn.attention.flex_attention import create_block_mask

    heads, n, m = visible.shape
    return create_block_mask(lambda b, h, i, j: visible[h, i, j], None, heads, n, m, device=visible.device)


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
