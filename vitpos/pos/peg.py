"""`peg`: the positional encoding generator of CPVT (Chu et al.), a conditional position encoding.

After block 0 the patch tokens, seen as a (D, h, w) image, get a depthwise 3x3 convolution (zero
padding, with bias) added as a residual: x + conv(x). Position is conditioned on the neighbourhood,
and the zero padding tells tokens near the border where they are, so the model knows absolute
position without a table. Prefix tokens pass through unchanged.

Methods for a new grid:

* ``conv`` (default): the kernel as trained, whatever the grid;
* ``dilate``: the kernel dilated by the grid's scale against the training grid, per axis and rounded
  (h / h_train rounded half up, at least 1), so that under zoom it spans the same part of the scene it saw in
  training. On a grid upsampled by repeating each token k x k it equals the trained conv on the original
  grid, repeated: the kernel's reach in scene units is the one thing it changes.

Initialisation as CPVT/Twins (their global init covers the conv): weights normal(0, sqrt(2 / fan_out)),
fan_out = 9 for a depthwise 3x3, bias zero.

Weight decay: not the plain one. The official code (Twins/CPVT, same authors) lists every ``pos_block``
parameter in ``no_weight_decay()``; like every position parameter, the kernel is pulled towards its initial value
instead (the position rule, vitpos.optim), which a decay towards zero would erase.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .base import Grid, PosScheme


class PegPos(PosScheme):
    """Depthwise 3x3 conv over the token grid, added after block 0 (``after_block`` hook)."""

    methods = ("conv", "dilate")

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
        patches = patches + rearrange(self.conv(img, grid), "b d h w -> b (h w) d")
        return torch.cat([prefix, patches], dim=1) if p else patches

    def dilation(self, grid: Grid) -> tuple[int, int]:
        """The kernel's dilation per axis on ``grid``: 1 under ``conv``, the rounded scale under ``dilate``."""
        if self.method == "conv":
            return (1, 1)
        # floor(x + 0.5): Python's round() sends 2.5 to 2 and 3.5 to 4
        return tuple(max(1, math.floor(g / t + 0.5)) for g, t in zip(grid, self.train_grid))  # type: ignore[return-value]

    def conv(self, img: Tensor, grid: Grid) -> Tensor:
        """The depthwise conv of the (B, D, h, w) token image, dilated by the method; same-size output."""
        dil = self.dilation(grid)
        pad = tuple(d * (self.proj.kernel_size[0] // 2) for d in dil)
        return F.conv2d(img, self.proj.weight, self.proj.bias, padding=pad, dilation=dil, groups=self.dim)
