"""`cpb`: Swin v2's log-spaced continuous position bias, a small MLP per block over offsets.

Each block owns an MLP 2 -> hidden -> heads (ReLU between, no bias on the last layer, as in Swin v2)
evaluated at every relative offset (dy, dx) of the grid. Offsets are normalised by the training
grid, (dy / (H-1), dx / (W-1)) * 8, so the trained range maps to [-8, 8], then log-spaced:
sign(d) * log2(1 + |d|) / log2(8). The bias is 16 * sigmoid(mlp(...)), in (0, 16).

The MLP runs once per unique offset, ((2h-1)(2w-1), 2), for all blocks at once (stacked weights),
and its output is gathered into (heads, N, N) with timm's relative position index, so the bias depends
on the offset alone. Nothing is resized for a new grid:

* ``continuous``: offsets of the new grid normalised by the *training* grid, so offsets beyond the
  trained range extrapolate (log spacing keeps them close to it);
* ``normalized``: offsets normalised by the *new* grid (the range always maps to [-8, 8]).

Initialisation follows Swin v2, whose global init covers this MLP: weights trunc-normal (std .02),
biases zero. The MLP is a position parameter: no plain weight decay, the position rule's pull towards its start
instead (vitpos.optim).

With position augmentation (training only) the MLP runs at the (N, N) offsets between the augmented patch
coordinates instead, normalised and log-spaced the same way (no table: fuzzy offsets differ per pair).

With a class token, each block and head also learns the bias between it and the patches
(``prefix_bias``, as BEiT: prefix -> patch, patch -> prefix, prefix -> prefix). It starts at 8, the
bias the MLP gives every offset at init (16 * sigmoid(~0)): a prefix padded with 0 instead would sit
8 logits below every patch, and a patch query would give the class token ~1/3000 of the attention a
patch gets.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import gen_relative_log_coords, gen_relative_position_index, trunc_normal_
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme, add_prefix_bias, coord_offsets, prefix_bias_param


def log_offsets_table(grid: Grid, norm_grid: Grid, device=None) -> Tensor:
    """((2h-1)(2w-1), 2) log-spaced (dy, dx) offsets of ``grid``, normalised by ``norm_grid`` (timm's Swin v2
    ``gen_relative_log_coords``).

    Row r = (dy + h-1) * (2w-1) + (dx + w-1), the order of the relative position index.
    """
    # timm divides by (size - 1) unguarded; a size of at least 2 keeps a one-row grid at offset 0 / 1, not 0 / 0
    norm = (max(norm_grid[0], 2), max(norm_grid[1], 2))
    return gen_relative_log_coords(tuple(grid), norm, mode="swin", device=device, dtype=torch.float32).reshape(-1, 2)


def log_spaced(dy: Tensor, dx: Tensor, norm_grid: Grid) -> Tensor:
    """(..., 2) Swin v2's log-spaced offsets of any real offsets (dy, dx): the formula of :func:`log_offsets_table`."""
    norm = torch.tensor([max(norm_grid[0], 2) - 1.0, max(norm_grid[1], 2) - 1.0], device=dy.device)
    d = torch.stack([dy, dx], dim=-1) / norm * 8
    return torch.sign(d) * torch.log2(d.abs() + 1.0) / math.log2(8)


class CpbPos(PosScheme):
    """Continuous position bias: per block an MLP over log-spaced offsets, output 16 * sigmoid."""

    methods = ("continuous", "normalized")
    frame = "grid"

    def __init__(self, *, cpb_hidden: int = 512, init_std: float = 0.02, **kw):
        super().__init__(**kw)
        self.w1 = nn.Parameter(torch.zeros(self.depth, 2, cpb_hidden))
        self.b1 = nn.Parameter(torch.zeros(self.depth, 1, cpb_hidden))
        self.w2 = nn.Parameter(torch.zeros(self.depth, cpb_hidden, self.num_heads))
        trunc_normal_(self.w1, std=init_std)
        trunc_normal_(self.w2, std=init_std)
        self.prefix_bias = prefix_bias_param(self.depth, self.num_heads, self.num_prefix_tokens, init=8.0)

    def offsets_table(self, grid: Grid) -> tuple[Tensor, Tensor]:
        """The offsets table ((2h-1)(2w-1), 2) and the (N, N) index into it; cached per grid and method."""

        def build() -> tuple[Tensor, Tensor]:
            norm = tuple(grid) if self.method == "normalized" else self.train_grid
            device = self.w1.device
            return log_offsets_table(grid, norm, device), gen_relative_position_index(tuple(grid), device=device)

        return self.cached(("coords", tuple(grid), self.w1.device), build)

    def mlp(self, table: Tensor) -> Tensor:
        """(T, 2) log-spaced offsets -> (depth, T, heads) bias, 16 * sigmoid of each block's MLP."""
        hidden = F.relu(torch.einsum("tc,lch->lth", table.to(self.w1.dtype), self.w1) + self.b1)
        return 16 * torch.sigmoid(torch.einsum("lth,lhk->ltk", hidden, self.w2))

    def bias(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, P+N) bias, (0, 16) between patches; prefix rows and columns from ``prefix_bias``."""
        n = grid[0] * grid[1]
        if self.augmenting:  # offsets between augmented coordinates: one MLP input per pair, query minus key
            dy, dx = coord_offsets(self.coords(grid, self.w1.device))
            norm = tuple(grid) if self.method == "normalized" else self.train_grid
            out = self.mlp(log_spaced(-dy, -dx, norm).reshape(-1, 2))  # (depth, N*N, heads)
            bias = rearrange(out, "l (i j) heads -> l heads i j", i=n)
        else:
            table, index = self.offsets_table(grid)
            # one gather for all blocks; contiguous so that SDPA reads each block's mask in place
            bias = rearrange(self.mlp(table)[:, index.flatten()], "l (i j) heads -> l heads i j", i=n)
        return add_prefix_bias(bias, self.prefix_bias, self.num_prefix_tokens).contiguous()

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        params = [p for p in (self.w1, self.b1, self.w2, self.prefix_bias) if p is not None]
        bias = self.cached(("bias", tuple(grid), device), lambda: self.bias(grid).to(device), *params)
        return [AttnPos(bias=b) for b in bias.unbind(0)]
