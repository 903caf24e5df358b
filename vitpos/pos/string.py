"""`string`: Cayley-STRING ("Learning the RoPE", Schenck et al., ICML 2025), axial RoPE after a learned orthogonal map.

Every block and head owns an orthogonal P that turns q and k of every token before rope2d's axial rotation R(p):

    q -> R(p) P q,   k -> R(p) P k,

so the logit (R(p) P q)^T (R(r) P k) = q^T P^T R(r - p) P k still depends on the offset r - p alone: RoPE's
relative property holds for any fixed P, while P chooses which directions of the head rotate at which frequency.
Cayley-STRING parameterises P by a learned skew-symmetric S (S^T = -S, its d(d-1)/2 upper entries stored):

    P = (I - S)(I + S)^-1,

orthogonal for every S (I + S is invertible: the eigenvalues of S are imaginary). S starts at 0, where P = I and the
scheme is rope2d exactly. P is computed in fp32 with autocast off, as (I + S)^-1 (I - S) (the two factors commute).
The coordinates, options and methods for a new grid are rope2d's (``vitpos.pos.rope2d``); S is a position
parameter (no plain weight decay).

Inference: P is fixed, so it folds into the q and k projections (per head, W_q -> P W_q and b_q -> P b_q, the same
for k). :meth:`StringPos.fold` returns rope2d's scheme and the maps to fold; ``vitpos.export`` exports the folded
model, which then takes rope2d's path at rope2d's cost. Training pays a d x d solve per block and head and one
d x d product per head on q and k.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme
from .liere import skew_from_coefficients
from .rope2d import Rope2dPos


def cayley(skew: Tensor) -> Tensor:
    """(..., d, d) orthogonal (I - S)(I + S)^-1 of skew-symmetric S (..., d, d)."""
    eye = torch.eye(skew.shape[-1], dtype=skew.dtype, device=skew.device)
    return torch.linalg.solve(eye + skew, eye - skew)  # (I + S)^-1 (I - S): the factors commute


class StringPos(Rope2dPos):
    """rope2d after a learned orthogonal P = Cayley(S) per block and head (AttnPos.mix); S = 0 at init.

    Its default method, ``yarn``, is the one the validation split chose (docs/protocol.md), by a fraction of a point
    over ``interpolate``."""

    methods = ("yarn", "interpolate", "extrapolate", "ntk")

    def __init__(self, **kw):
        super().__init__(**kw)
        d = self.head_dim
        self.skew = nn.Parameter(torch.zeros(self.depth, self.num_heads, d * (d - 1) // 2))

    def orthogonal(self) -> Tensor:
        """(depth, heads, d, d) P = Cayley(S), fp32."""
        with torch.autocast(self.skew.device.type, enabled=False):
            return cayley(skew_from_coefficients(self.skew.float(), self.head_dim))

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        rope = super().attn_pos(grid, device)
        mix = self.cached(("mix", device), lambda: self.orthogonal().to(device), self.skew)
        return [dataclasses.replace(a, mix=m) for a, m in zip(rope, mix.unbind(0), strict=True)]

    def fold(self) -> tuple[PosScheme, Tensor]:
        """rope2d with the same options, coordinates, augmentation and method, and P (depth, heads, d, d) to fold."""
        rope = Rope2dPos(dim=self.dim, num_heads=self.num_heads, depth=self.depth, grid=self.train_grid,
                         num_prefix_tokens=self.num_prefix_tokens, pos_aug=self.pos_aug,
                         **self.options_now())  # fmt: skip
        rope.method = self.method
        rope.train(self.training)
        with torch.no_grad():
            return rope, self.orthogonal()
