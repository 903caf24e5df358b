"""`alibi2d`: ALiBi (Press et al. 2022) brought to 2D, a fixed distance penalty on the attention logits.

Head h of H adds -m_h * d(i, j) to the logit between tokens i and j, where d is the Euclidean distance
between the two patch centres in patch units and m_h = 2^(-8h/H), h = 1..H, ALiBi's geometric slopes
(the first head looks most locally, the last almost globally). Every block gets the same bias. The bias
depends on the offset alone (and only on its length: it cannot tell left from right); there are no
learned parameters.

Prefix tokens (a class token) get zero rows and columns: they see, and are seen by, every patch
without a penalty.

Methods for a grid (h, w) other than the training one (H, W):

* ``extrapolate``: distances as they are, so a head keeps its trained reach in patches;
* ``scaled``: offsets scaled by the training grid over the new one per axis, (dy * H/h, dx * W/w),
  before the distance is taken, so the whole image spans the distances seen in training.

Offsets are taken between the patch coordinates the seam gives (integer positions; augmented in training).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import AttnPos, Grid, PosScheme, coord_offsets


def alibi_slopes(num_heads: int) -> Tensor:
    """(heads,) ALiBi's geometric slopes 2^(-8h/H), h = 1..H."""
    return torch.exp2(-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads)


def scaled_offsets(scheme: PosScheme, grid: Grid, scaled: bool, device=None) -> tuple[Tensor, Tensor]:
    """(N, N) row and column offsets (key minus query) between the scheme's coordinates of ``grid`` in patch units,
    fp64; scaled onto the trained extent."""
    dy, dx = coord_offsets(scheme.coords(grid, device, dtype=torch.float64))
    train_grid = scheme.train_grid
    if scaled:
        dy, dx = dy * (train_grid[0] / grid[0]), dx * (train_grid[1] / grid[1])
    return dy, dx


def pad_prefix(bias: Tensor, num_prefix_tokens: int) -> Tensor:
    """Zero prefix rows and columns in front of a (..., N, N) bias."""
    p = num_prefix_tokens
    return F.pad(bias, [p, 0, p, 0]) if p else bias


class Alibi2dPos(PosScheme):
    """-m_h * Euclidean distance added to every block's logits; no parameters."""

    methods = ("extrapolate", "scaled")
    frame = "grid"

    def bias(self, grid: Grid, device=None) -> Tensor:
        """(heads, P+N, P+N) fp32 bias for ``grid`` under the current method."""
        dy, dx = scaled_offsets(self, grid, self.method == "scaled", device)
        dist = (dy * dy + dx * dx).sqrt()  # (N, N); not hypot, which ONNX has no kernel for
        bias = -alibi_slopes(self.num_heads).to(dist.device)[:, None, None] * dist  # (heads, N, N)
        return pad_prefix(bias.float(), self.num_prefix_tokens)

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        bias = self.cached(("bias", tuple(grid), device), lambda: self.bias(grid, device))
        return [AttnPos(bias=bias)] * self.depth
