"""`learned`: a learned absolute table, one vector per patch position, added to the tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import resample_abs_pos_embed, trunc_normal_
from torch import Tensor, nn

from .base import Grid, PosScheme


class LearnedPos(PosScheme):
    """Learned absolute table (1, H*W, D), trunc-normal init (std .02) as in ViT/DeiT.

    A new grid gets the table resampled bicubically (antialiased, in fp32, with timm's
    ``resample_abs_pos_embed``); the result is cached per grid until the table changes.

    With position augmentation (training only) the table, seen as an image of the training grid, is sampled
    bilinearly at the augmented patch centres (normalised frame: the table's edges at -1 and 1, border values
    beyond them): ViTAR's fuzzy positional encoding, and DINOv3's shift, jitter and rescale alike.
    """

    methods = ("bicubic",)
    frame = "separate"

    def __init__(self, *, init_std: float = 0.02, **kw):
        super().__init__(**kw)
        h, w = self.train_grid
        self.table = nn.Parameter(torch.zeros(1, h * w, self.dim))
        trunc_normal_(self.table, std=init_std)

    def table_for(self, grid: Grid) -> Tensor:
        """(1, h*w, D) table for ``grid``: the parameter itself at the training grid."""
        if self.augmenting:
            return self.sampled(grid)
        if not torch.compiler.is_exporting() and tuple(grid) == self.train_grid:  # exported: one graph, any grid
            return self.table

        def build() -> Tensor:
            return resample_abs_pos_embed(
                self.table, new_size=list(grid), old_size=list(self.train_grid), num_prefix_tokens=0
            )

        return self.cached(("table", tuple(grid), self.table.device), build, self.table)

    def sampled(self, grid: Grid) -> Tensor:
        """(1, h*w, D): the table sampled bilinearly at the coordinates of ``grid`` (augmented in training)."""
        c = self.coords(grid, self.table.device).to(self.table.dtype)  # (N, 2) (y, x) in [-1, 1] at the patch centres
        image = rearrange(self.table, "1 (h w) d -> 1 d h w", h=self.train_grid[0])
        at = rearrange(c.flip(-1), "n xy -> 1 1 n xy")  # grid_sample reads (x, y)
        out = F.grid_sample(image, at, mode="bilinear", padding_mode="border", align_corners=False)  # (1, D, 1, N)
        return rearrange(out, "1 d 1 n -> 1 n d")

    def state_at_grid(self, grid: Grid) -> dict[str, Tensor]:
        with torch.no_grad():
            return {"table": self.table_for(grid).detach().clone()}

    def tokens(self, x: Tensor, grid: Grid) -> Tensor:
        return x + self.table_for(grid).to(x.dtype)
