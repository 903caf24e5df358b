"""`sincos2d`: the fixed 2D sin-cos embedding (MoCo v3 / big_vision), added to the tokens."""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Grid, PosScheme


def posemb_sincos_2d(ys: Tensor, xs: Tensor, dim: int, temperature: float = 10000.0) -> Tensor:
    """(N,) row and column positions (any real values) -> (N, dim) embedding.

    dim splits into four quarters: sin(y w), cos(y w), sin(x w), cos(x w), w_k = T^(-k / (dim/4)).
    """
    if dim % 4:
        raise ValueError(f"sincos2d needs embed_dim divisible by 4, got {dim}")
    quarter = dim // 4
    omega = temperature ** -(torch.arange(quarter, dtype=torch.float64, device=ys.device) / quarter)
    y = ys.double()[:, None] * omega  # (N, D/4)
    x = xs.double()[:, None] * omega
    return torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], dim=1).float()


class SinCos2dPos(PosScheme):
    """Fixed 2D sin-cos table; no parameters.

    Methods for a new grid: ``interpolate`` (the default, chosen on the validation split; docs/protocol.md) scales
    the new grid's positions onto the training range (position y -> y * H_train / h); ``extrapolate`` uses its
    integer positions.
    """

    methods = ("interpolate", "extrapolate")
    frame = "grid"

    def __init__(self, *, temperature: float = 10000.0, **kw):
        super().__init__(**kw)
        self.temperature = temperature
        posemb_sincos_2d(torch.zeros(1), torch.zeros(1), self.dim)  # validate dim early

    def table_for(self, grid: Grid, device=None) -> Tensor:
        def build() -> Tensor:
            ys, xs = self.coords(grid, device).unbind(-1)
            if self.method == "interpolate":
                ys = ys * (self.train_grid[0] / grid[0])
                xs = xs * (self.train_grid[1] / grid[1])
            return posemb_sincos_2d(ys, xs, self.dim, self.temperature)[None]  # (1, N, D)

        return self.cached(("table", tuple(grid), device), build)

    def tokens(self, x: Tensor, grid: Grid) -> Tensor:
        return x + self.table_for(grid, x.device).to(x.dtype)
