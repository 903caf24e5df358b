"""`relbias`: Swin-style relative position bias, a learned table per block added to the logits.

Each block owns a table of (2H-1)(2W-1) x heads entries (trunc-normal, std .02); the bias
between tokens i and j is table[(dy + H-1) * (2W-1) + (dx + W-1)] with (dy, dx) their offset,
so it depends on the offset alone. ``locality`` (default 1) starts each table from a distance penalty,
-locality * 2^-h * |offset| for head h = 0, 1, ... (Euclidean, in patches), on top of the noise: attention is local
from the first step, as in ALiBi, with steeper slopes. ``locality=0`` is Swin's start, noise alone; the start was
chosen on validation top-1 (docs/protocol.md). With a class token, each block and head also learns the bias between
it and the patches (``prefix_bias``, as BEiT: prefix -> patch, patch -> prefix, prefix -> prefix), zero at init like
the table's mean.

Methods for a new grid (h, w):

* ``resize``: the table, seen as (heads, 2H-1, 2W-1), is resized bicubically to
  (2h-1, 2w-1), as Swin does when fine-tuning at a larger window;
* ``clamp``: offsets beyond the trained range are clamped to it (the table is unchanged);
* ``geometric``: BEiT's fine-tuning rule, timm's ``resize_rel_pos_bias_table``: the trained offsets are
  spread over the new range by a geometric progression and the table interpolated between them.

``buckets`` (T5's relative buckets, per axis) replaces the table of every offset by one of B x B entries: per axis,
half the B buckets hold the positive offsets and half the negative; offsets below B/4 in magnitude get a bucket each,
longer ones share log-spaced buckets up to ``bucket_distance`` patches (default 4 B, T5's ratio: 128 for 32), and
every offset beyond it shares the last bucket. Any grid is served by construction: nothing in the table or the
bucketing depends on the grid, every method gives the same bias, and there is nothing to resize. ``locality``
starts each bucket from the penalty at its mean offset.

With prefix (class) tokens, ``prefix_bias`` (depth, heads, 3) holds each head's learned logit bias for
prefix query -> patch key, patch query -> prefix key and prefix -> prefix (BEiT's three extra table
entries); it starts at zero and no grid changes it.
"""

from __future__ import annotations

import math
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


def t5_bucket(d: Tensor, buckets: int, max_distance: float) -> Tensor:
    """T5's bidirectional bucket in [0, buckets) of integer offsets ``d``: buckets/2 per sign (positive offsets in
    the upper half), magnitudes below buckets/4 exact, then log-spaced up to ``max_distance``, beyond it the last."""
    half = buckets // 2
    exact = half // 2
    a = d.abs()
    log_ratio = torch.log(a.double().clamp_min(1.0) / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (half - exact)).long()).clamp(max=half - 1)
    return torch.where(d > 0, half, 0) + torch.where(a < exact, a, far)


def bucket_means(buckets: int, max_distance: int) -> Tensor:
    """(buckets,) fp64 mean offset of each bucket over the offsets -max_distance..max_distance (0 where none falls)."""
    d = torch.arange(-max_distance, max_distance + 1)
    b = t5_bucket(d, buckets, max_distance)
    total = torch.zeros(buckets, dtype=torch.float64).index_add_(0, b, d.double())
    count = torch.zeros(buckets, dtype=torch.float64).index_add_(0, b, torch.ones_like(d, dtype=torch.float64))
    return total / count.clamp_min(1)


class RelBiasPos(PosScheme):
    """Per-block relative position bias tables, stored together as one (depth, T, heads) parameter."""

    methods = ("resize", "clamp", "geometric")

    def __init__(
        self, *, init_std: float = 0.02, locality: float = 1.0, buckets: int | None = None,
        bucket_distance: int | None = None, **kw,
    ):  # fmt: skip
        super().__init__(**kw)
        h, w = self.train_grid
        self.buckets = buckets
        if buckets is not None:
            if not (isinstance(buckets, int) and buckets >= 4 and buckets % 2 == 0):
                raise ValueError(f"relbias buckets must be an even integer >= 4 (per axis), got {buckets!r}")
            far = 4 * buckets if bucket_distance is None else bucket_distance
            if far <= buckets // 4:
                raise ValueError(f"relbias bucket_distance must exceed buckets/4 = {buckets // 4}, got {far}")
            self.bucket_distance = far
        size = buckets * buckets if buckets is not None else (2 * h - 1) * (2 * w - 1)
        self.table = nn.Parameter(torch.zeros(self.depth, size, self.num_heads))
        if init_std:
            trunc_normal_(self.table, std=init_std)
        if locality:  # a distance penalty to start from, steepest in the first head (halving per head), in every block
            with torch.no_grad():
                if buckets is None:
                    dy, dx = table_offsets(self.train_grid)
                else:  # each bucket's mean offset
                    means = bucket_means(buckets, self.bucket_distance)
                    dy, dx = torch.meshgrid(means, means, indexing="ij")
                dist = rearrange((dy.square() + dx.square()).double().sqrt(), "y x -> (y x)")  # (T,), table order
                slopes = locality * 2.0 ** -torch.arange(self.num_heads, dtype=torch.float64)  # (heads,)
                self.table.sub_((dist[:, None] * slopes[None, :]).to(self.table.dtype))
        self.prefix_bias = prefix_bias_param(self.depth, self.num_heads, self.num_prefix_tokens, init=0.0)

    def table_for(self, grid: Grid) -> tuple[Tensor, Grid]:
        """The (depth, T, heads) table to index for ``grid`` and the grid it was built for."""
        if self.buckets is not None:
            return self.table, self.train_grid
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

    def state_at_grid(self, grid: Grid) -> dict[str, Tensor]:
        if self.buckets is not None:  # nothing in the state is sized by the grid
            return super().state_at_grid(grid)
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

    def index(self, grid: Grid, table_grid: Grid) -> Tensor:
        """(N, N) entry of the table that each pair of tokens of ``grid`` reads."""
        if self.buckets is None:
            return relative_position_index(grid, table_grid, self.method == "clamp", self.table.device)
        dy, dx = relative_offsets(grid, self.table.device)
        b, far = self.buckets, self.bucket_distance
        return t5_bucket(dy, b, far) * b + t5_bucket(dx, b, far)

    def bias(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, P+N) bias for ``grid``; prefix rows and columns from ``prefix_bias``."""
        table, table_grid = self.table_for(grid)
        index = self.cached(("index", tuple(grid), table_grid, self.method, self.table.device),
                            lambda: self.index(grid, table_grid))  # fmt: skip
        n = grid[0] * grid[1]
        # one gather for all blocks; contiguous so that SDPA reads each block's (heads, N, N) mask in place
        bias = rearrange(table[:, index.flatten()], "l (i j) heads -> l heads i j", i=n)
        return add_prefix_bias(bias, self.prefix_bias, self.num_prefix_tokens).contiguous()

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        params = [p for p in (self.table, self.prefix_bias) if p is not None]
        bias = self.cached(("bias", tuple(grid), self.table.device), lambda: self.bias(grid), *params)
        return [AttnPos(bias=b) for b in bias.unbind(0)]
