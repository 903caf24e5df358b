"""`peg`: the positional encoding generator of CPVT (Chu et al.), a conditional position encoding.

After block 0 the patch tokens, seen as a (D, h, w) image, get a depthwise 3x3 convolution (zero
padding, with bias) added as a residual: x + conv(x). Position is conditioned on the neighbourhood,
and the zero padding tells tokens near the border where they are, so the model knows absolute
position without a table. Prefix tokens pass through unchanged. Any grid is served as it is.

Initialisation as CPVT/Twins (their global init covers the conv): weights normal(0, sqrt(2 / fan_out)),
fan_out = 9 for a depthwise 3x3, bias zero.

Weight decay: not the plain one. The official code (Twins/CPVT, same authors) lists every ``pos_block``
parameter in ``no_weight_decay()``; like every position parameter, the kernel is pulled towards its initial value
instead (the position rule, vitpos.optim), which a decay towards zero would erase.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn

from .base import Grid, PosScheme


class PegPos(PosScheme):
    """Depthwise 3x3 conv over the token grid, added after block 0 (``after_block`` hook)."""

    methods = ("conv",)

    def __init__(self, *, peg_kernel: int = 3, **kw):
        super().__init__(**kw)
        if peg_kernel % 2 == 0:
            raise ValueError(f"peg_kernel must be odd (same-size output), got {peg_kernel}")
        self.proj = nn.Conv2d(self.dim, self.dim, peg_kernel, padding=peg_kernel // 2, groups=self.dim, bias=True)
        nn.init.normal_(self.proj.weight, std=math.sqrt(2.0 / peg_kernel**2))
        nn.init.zeros_(self.proj.bias)

    def after_block(self, x: Tensor, grid: Grid, index: int) -> Tensor:
        if index != 0:
            return x
        p = self.num_prefix_tokens
        prefix, patches = x[:, :p], x[:, p:]  # (B, P, D), (B, N, D)
        img = rearrange(patches, "b (h w) d -> b d h w", h=grid[0], w=grid[1])
        patches = patches + rearrange(self.proj(img), "b d h w -> b (h w) d")
        return torch.cat([prefix, patches], dim=1) if p else patches
