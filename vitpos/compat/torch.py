"""Where vitpos reaches into torch's internals, and only here: the fused CPU attention kernel.

``LearnedBiasAttention`` (vitpos.attention) runs the forward of SDPA's fused (flash) CPU kernel itself, because only
the kernel's own entry point returns the log-sum-exp its memory-light backward needs. On a build without the kernel
:data:`FLASH_CPU` is None and attention takes SDPA's ordinary path. tests/test_compat.py checks every name in
:data:`PRIVATE` against the installed torch.
"""

from __future__ import annotations

import torch

PRIVATE = (("torch.ops.aten", "_scaled_dot_product_flash_attention_for_cpu"),)

# (q, k, v, dropout_p, is_causal, *, attn_mask, scale) -> (out, logsumexp), q/k/v (B, heads, N, d)
FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
