"""`relbias`: Swin-style relative position bias, a learned table per block added to the logits.

Each block owns a table of (2H-1)(2W-1) x heads entries (trunc-normal, std .02); the bias
between tokens i and j is table[(dy + H-1) * (2W-1) + (dx + W-1)] with (dy, dx) their offset,
so it depends on the offset alone. ``locality`` (default 1) starts each table from a distance penalty,
-locality * 2^-h * |offset| for head h = 0, 1, ... (Euclidean, in patches), on top of the noise: attention is local
from the first step, as in ALiBi, with steeper slopes. ``locality=0`` is Swin's start, noise alone: under the default
position rule's ramp a `relbias` seed then stayed at 25-35 %, about what a model blind to patch order reaches
(docs/results.md). With a class token, each block and head also learns the bias between it and the patches
(``prefix_bias``, as BEiT: prefix -> patch, patch -> prefix, prefix -> prefix), zero at init like the table's mean.

Methods for a new grid (h, w):

* ``resize``: the table, seen as (heads, 2H-1, 2W-1), is resized bicubically to
  (2h-1, 2w-1), as Swin does when fine-tuning at a larger window;
* ``clamp``: offsets beyond the trained range are clamped to it (the table is unchanged);
* ``geometric``: BEiT's fine-tuning rule, timm's ``resize_rel_pos_bias_table``: the trained offsets are
  spread over the new range by a geometric progression and the table interpolated between them.

With prefix (class) tokens, ``prefix_bias`` (depth, heads, 3) holds each head's learned logit bias for
prefix query -> patch key, patch query -> prefix key and prefix -> prefix (BEiT's three extra table
entries); it starts at zero and no grid changes it.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import gen_relative_position_index, resize_rel_pos_bias_table, trunc_normal_
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme, add_prefix_bias, grid_coords, prefix_bias_param


def relative_offsets(grid: Grid, device=None) -> tuple[Tensor, Tensor]:
    """(N, N) row and column offsets (query minus key) between all tokens of ``grid``."""
    ys, xs = grid_coords(grid, device=device, dtype=torch.long)
    return ys[:, None] - ys[None, :], xs[:, None] - xs[None, :]


def table_offsets(grid: Grid) -> tuple[Tensor, Tensor]:
    """(2H-1, 2W-1) row and column offsets, laid out as a table built for ``grid`` holds its entries."""
    h, w = grid
    return torch.meshgrid(torch.arange(1 - h, h), torch.arange(1 - w, w), indexing="ij")


def relative_position_index(grid: Grid, table_grid: Grid | None = None, clamp: bool = False, device=None) -> Tensor:
    """(N, N) index into a ((2H-1)(2W-1),) table built for ``table_grid`` (default: ``grid``)."""
    if not clamp and (table_grid is None or tuple(table_grid) == tuple(grid)):
        return gen_relative_position_index(tuple(grid), device=device)  # timm's (Swin's) index
    # timm's index only serves a table of the grid's own size; offsets clamped into another table are ours
    big_h, big_w = table_grid or grid
    dy, dx = relative_offsets(grid, device)
    if clamp:
        dy, dx = dy.clamp(-(big_h - 1), big_h - 1), dx.clamp(-(big_w - 1), big_w - 1)
    return (dy + big_h - 1) * (2 * big_w - 1) + (dx + big_w - 1)


class RelBiasPos(PosScheme):
    """Per-block relative position bias tables, stored together as one (depth, T, heads) parameter."""

    methods = ("resize", "clamp", "geometric")

    def __init__(self, *, init_std: float = 0.02, locality: float = 1.0, **kw):
        super().__init__(**kw)
        h, w = self.train_grid
        self.table = nn.Parameter(torch.zeros(self.depth, (2 * h - 1) * (2 * w - 1), self.num_heads))
        if init_std:
            trunc_normal_(self.table, std=init_std)
        if locality:  # a distance penalty to start from, steepest in the first head (halving per head), in every block
            with torch.no_grad():
                dy, dx = table_offsets(self.train_grid)
                dist = rearrange((dy.square() + dx.square()).double().sqrt(), "y x -> (y x)")  # (T,), table order
                slopes = locality * 2.0 ** -torch.arange(self.num_heads, dtype=torch.float64)  # (heads,)
                self.table.sub_((dist[:, None] * slopes[None, :]).to(self.table.dtype))
        self.prefix_bias = prefix_bias_param(self.depth, self.num_heads, self.num_prefix_tokens, init=0.0)

    def table_for(self, grid: Grid) -> tuple[Tensor, Grid]:
        """The (depth, T, heads) table to index for ``grid`` and the grid it was built for."""
        if self.method == "clamp" or (not torch.compiler.is_exporting() and tuple(grid) == self.train_grid):
            return self.table, self.train_grid
        h, w = self.train_grid
        size = (2 * grid[0] - 1, 2 * grid[1] - 1)
        if self.method == "geometric":
            with warnings.catch_warnings():  # timm's interpolator warns about its own indexing
                warnings.simplefilter("ignore", UserWarning)
                t = torch.stack([
                    resize_rel_pos_bias_table(block.float(), new_window_size=tuple(grid),
                                              new_bias_shape=(size[0] * size[1], self.num_heads),
                                              old_window_size=self.train_grid)
                    for block in self.table.unbind(0)
                ])  # fmt: skip
            return t.to(self.table.dtype), tuple(grid)
        t = rearrange(self.table, "l (y x) heads -> l heads y x", y=2 * h - 1)
        t = F.interpolate(t.float(), size=size, mode="bicubic", align_corners=False)
        return rearrange(t, "l heads y x -> l (y x) heads").to(self.table.dtype), tuple(grid)

    def carry_state(self, grid: Grid) -> dict[str, Tensor]:
        with torch.no_grad():
            if self.method == "clamp":  # the new table holds, per offset of the new range, the clamped entry
                dy, dx = table_offsets(grid)
                big_h, big_w = self.train_grid
                dy, dx = dy.clamp(1 - big_h, big_h - 1), dx.clamp(1 - big_w, big_w - 1)
                table = self.table[:, ((dy + big_h - 1) * (2 * big_w - 1) + dx + big_w - 1).flatten()]
            else:
                table = self.table_for(grid)[0]
            state = {"table": table.detach().clone()}
            if self.num_prefix_tokens:
                state["prefix_bias"] = self.prefix_bias.detach().clone()
            return state

    def bias(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, P+N) bias for ``grid``; prefix rows and columns from ``prefix_bias``."""
        table, table_grid = self.table_for(grid)
        index = self.cached(
            ("index", tuple(grid), table_grid, self.method, self.table.device),
            lambda: relative_position_index(grid, table_grid, self.method == "clamp", self.table.device),
        )
        n = grid[0] * grid[1]
        # one gather for all blocks; contiguous so that SDPA reads each block's (heads, N, N) mask in place
        bias = rearrange(table[:, index.flatten()], "l (i j) heads -> l heads i j", i=n)
        return add_prefix_bias(bias, self.prefix_bias, self.num_prefix_tokens).contiguous()

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        params = [p for p in (self.table, self.prefix_bias) if p is not None]
        bias = self.cached(("bias", tuple(grid), self.table.device), lambda: self.bias(grid), *params)
        return [AttnPos(bias=b) for b in bias.unbind(0)]
