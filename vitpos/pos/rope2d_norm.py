"""`rope2d-norm`: the axial RoPE of DINOv3 (facebookresearch/dinov3), on normalised patch-centre coordinates.

Token (i, j) of an h x w grid sits at the patch centre (i + 0.5, j + 0.5) divided by a length D per
axis and mapped to [-1, 1]: c = 2 (i + 0.5) / D - 1. ``normalize``: ``separate`` (D = h for rows, w
for columns: both axes span [-1, 1]), ``min`` (D = min(h, w) for both) or ``max`` (D = max(h, w)).
Per head of width d there are d/4 periods T_k = base^(4k/d) (base 100); pair k of the row half turns
by 2 pi c_y / T_k, of the column half by 2 pi c_x / T_k. Pairs are interleaved as in ``rope2d``
(pair j is (q[2j], q[2j+1])); the row pairs come first, then the column pairs, DINOv3's order.

Augmentation of the coordinates, in training mode only (a fresh draw every forward; evaluation is
deterministic), each off when None; DINOv3's released defaults are rescale 2, shift and jitter off:

* ``shift``: c += u, one uniform offset in [-shift, shift] per axis;
* ``jitter``: c *= exp(u), one log-uniform scale in [1/jitter, jitter] per axis;
* ``rescale``: c *= exp(u), one log-uniform scale in [1/rescale, rescale] shared by both axes.

Coordinates, angles, cos and sin are computed in fp32 with autocast off, so bf16 training rotates
exactly as fp32 does.

Methods for a grid other than the training one:

* ``normalized`` (the default, DINOv3's behaviour): every grid is normalised onto [-1, 1] as above,
  which is position interpolation by construction;
* ``extrapolate``: D is the training grid's, so the spacing between tokens stays the trained one
  and a larger grid reaches beyond [-1, 1].

In evaluation the logit between two tokens depends only on their coordinate offset (RoPE's relative
property): under ``extrapolate`` only on their offset in patches.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import AttnPos, Grid, PosScheme
from .rope2d import check_base, rope_rotation

NORMALIZATIONS = ("separate", "min", "max")


def dinov3_periods(head_dim: int, base: float) -> Tensor:
    """(head_dim/4,) fp32 periods base^(4k/head_dim) = base^(2k/(head_dim/2))."""
    if head_dim % 4:
        raise ValueError(f"rope2d-norm needs a head dim divisible by 4, got {head_dim}")
    check_base("base", base)
    return base ** (4 * torch.arange(head_dim // 4, dtype=torch.float32) / head_dim)


def axis_lengths(grid: Grid, normalize: str) -> tuple[int, int]:
    """The lengths (D_y, D_x) that map the patch centres of ``grid`` onto [-1, 1]."""
    h, w = grid
    if normalize == "separate":
        return h, w
    d = min(h, w) if normalize == "min" else max(h, w)
    return d, d


def _log_uniform(n: int, bound: float, device) -> Tensor:
    return torch.empty(n, device=device).uniform_(-math.log(bound), math.log(bound)).exp()


class Rope2dNormPos(PosScheme):
    """DINOv3's RoPE: axial, no parameters, normalised coordinates, coordinate augmentation in training."""

    methods = ("normalized", "extrapolate")

    def __init__(
        self,
        *,
        base: float = 100.0,
        normalize: str = "separate",
        shift: float | None = None,
        jitter: float | None = None,
        rescale: float | None = 2.0,
        **kw,
    ):
        super().__init__(**kw)
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"rope2d-norm normalize must be one of {', '.join(NORMALIZATIONS)}, got '{normalize}'")
        for name, value, least in (("shift", shift, 0.0), ("jitter", jitter, 1.0), ("rescale", rescale, 1.0)):
            if value is not None and value < least:
                raise ValueError(f"rope2d-norm {name} must be at least {least} (or None for off), got {value}")
        self.base, self.normalize = base, normalize
        self.shift, self.jitter, self.rescale = shift, jitter, rescale
        dinov3_periods(self.head_dim, base)  # validate the head dim early

    @property
    def augments(self) -> bool:
        """Whether a forward now draws random coordinates (training mode with any augmentation on)."""
        return self.training and any(v is not None for v in (self.shift, self.jitter, self.rescale))

    def coords(self, grid: Grid, device=None) -> Tensor:
        """(N, 2) fp32 (c_y, c_x) of the tokens in row-major order, augmented in training mode."""
        norm_grid = grid if self.method == "normalized" else self.train_grid
        d_y, d_x = axis_lengths(norm_grid, self.normalize)
        c_y = 2.0 * (torch.arange(grid[0], device=device, dtype=torch.float32) + 0.5) / d_y - 1.0
        c_x = 2.0 * (torch.arange(grid[1], device=device, dtype=torch.float32) + 0.5) / d_x - 1.0
        c = torch.stack(torch.meshgrid(c_y, c_x, indexing="ij"), dim=-1).reshape(-1, 2)
        if self.training:
            if self.shift is not None:
                c = c + torch.empty(2, device=device).uniform_(-self.shift, self.shift)
            if self.jitter is not None:
                c = c * _log_uniform(2, self.jitter, device)
            if self.rescale is not None:
                c = c * _log_uniform(1, self.rescale, device)
        return c

    def angles(self, grid: Grid, device=None) -> Tensor:
        """(N, d/2) fp32 angles 2 pi c / T_k: the d/4 row pairs, then the d/4 column pairs."""
        with torch.autocast(torch.device(device or "cpu").type, enabled=False):
            c = self.coords(grid, device)
            angles = 2 * math.pi * c[:, :, None] / dinov3_periods(self.head_dim, self.base).to(c.device)  # (N, 2, d/4)
            return angles.flatten(1)

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        def build() -> list[AttnPos]:
            with torch.autocast(torch.device(device or "cpu").type, enabled=False):
                rot = rope_rotation(self.angles(grid, device), self.num_prefix_tokens)
            return [AttnPos(rope=rot)] * self.depth

        if self.augments:  # a fresh draw per forward: never served from the cache
            return build()
        return self.cached(("rope", tuple(grid), device), build)
