"""`relbias`: Swin-style relative position bias, a learned table per block added to the logits.

Each block owns a table of (2H-1)(2W-1) x heads entries (trunc-normal, std .02); the bias
between tokens i and j is table[(dy + H-1) * (2W-1) + (dx + W-1)] with (dy, dx) their offset,
so it depends on the offset alone.

Methods for a new grid (h, w):

* ``resize``: the table, seen as (heads, 2H-1, 2W-1), is resized bicubically to
  (2h-1, 2w-1), as Swin does when fine-tuning at a larger window;
* ``clamp``: offsets beyond the trained range are clamped to it (the table is unchanged).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import trunc_normal_
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme, grid_coords


def relative_offsets(grid: Grid, device=None) -> tuple[Tensor, Tensor]:
    """(N, N) row and column offsets (query minus key) between all tokens of ``grid``."""
    ys, xs = grid_coords(grid, device=device, dtype=torch.long)
    return ys[:, None] - ys[None, :], xs[:, None] - xs[None, :]


def relative_position_index(grid: Grid, table_grid: Grid | None = None, clamp: bool = False, device=None) -> Tensor:
    """(N, N) index into a ((2H-1)(2W-1),) table built for ``table_grid`` (default: ``grid``)."""
    big_h, big_w = table_grid or grid
    dy, dx = relative_offsets(grid, device)
    if clamp:
        dy, dx = dy.clamp(-(big_h - 1), big_h - 1), dx.clamp(-(big_w - 1), big_w - 1)
    return (dy + big_h - 1) * (2 * big_w - 1) + (dx + big_w - 1)


class RelBiasPos(PosScheme):
    """Per-block relative position bias tables, stored together as one (depth, T, heads) parameter."""

    methods = ("resize", "clamp")

    def __init__(self, *, init_std: float = 0.02, **kw):
        super().__init__(**kw)
        h, w = self.train_grid
        self.table = nn.Parameter(torch.zeros(self.depth, (2 * h - 1) * (2 * w - 1), self.num_heads))
        trunc_normal_(self.table, std=init_std)

    def table_for(self, grid: Grid) -> tuple[Tensor, Grid]:
        """The (depth, T, heads) table to index for ``grid`` and the grid it was built for."""
        if self.method == "clamp" or (not torch.compiler.is_exporting() and tuple(grid) == self.train_grid):
            return self.table, self.train_grid
        h, w = self.train_grid
        t = rearrange(self.table, "l (y x) heads -> l heads y x", y=2 * h - 1)
        t = F.interpolate(t.float(), size=(2 * grid[0] - 1, 2 * grid[1] - 1), mode="bicubic", align_corners=False)
        return rearrange(t, "l heads y x -> l (y x) heads").to(self.table.dtype), tuple(grid)

    def bias(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, P+N) bias for ``grid``; prefix rows and columns are zero."""
        table, table_grid = self.table_for(grid)
        index = self.cached(
            ("index", tuple(grid), table_grid, self.method, self.table.device),
            lambda: relative_position_index(grid, table_grid, self.method == "clamp", self.table.device),
        )
        n = grid[0] * grid[1]
        # one gather for all blocks; contiguous so that SDPA reads each block's (heads, N, N) mask in place
        bias = rearrange(table[:, index.flatten()], "l (i j) heads -> l heads i j", i=n).contiguous()
        p = self.num_prefix_tokens
        return F.pad(bias, [p, 0, p, 0]) if p else bias

    def attention(self, grid: Grid, device=None) -> list[AttnPos]:
        bias = self.cached(("bias", tuple(grid), self.table.device), lambda: self.bias(grid), self.table)
        return [AttnPos(bias=b) for b in bias.unbind(0)]
