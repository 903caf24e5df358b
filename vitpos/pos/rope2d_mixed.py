"""`rope2d-mixed`: RoPE-Mixed (Heo et al. 2024), rotary embedding with learned 2D frequencies.

Every block and head owns d/2 frequency vectors f = (fx, fy), one per rotary pair; pair k of a
token at (y, x) turns by the phase x * fx + y * fy. The phase is linear in the position, so the
logit between two tokens still depends only on their offset, but a frequency may point along any
direction: axes "mix", which axial RoPE cannot express (diagonal structure).

Initialisation as in the paper (naver-ai/rope-vit): theta = 10, magnitudes |f_k| = theta^(-4k/d)
for k in [0, d/4); per block and head a random angle phi; the first d/4 pairs point at phi and the
other d/4 at phi + pi/2, so at init each head is an axial RoPE in a randomly rotated frame.

The frequencies are one (depth, heads, d/2, 2) parameter, last axis (fx, fy); no plain weight decay (decay towards
zero would erase them), the position rule's pull towards their start instead.
Phases and cos/sin are computed in fp32 with autocast off (bf16 phases are wrong by whole
radians at the positions of a large grid), once per forward for all blocks and heads.

Methods for a new grid are rope2d's (see :func:`rope2d.transfer_frequencies`), applied to each
frequency vector per axis (s = new size / trained size): ``interpolate`` (the default: fx / s_x, fy / s_y,
i.e. positions scaled onto the trained range), ``extrapolate``, ``ntk`` (each component of pair k scaled
by s^(-(4k/d) d'/(d'-2)), as if theta were raised, k its place on the init ladder) and ``yarn``
(per-pair blend by the wavelength of |f|, with rope2d's ramp and attention temperature).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme
from .rope2d import YARN_ALPHA, YARN_BETA, axial_frequencies, check_yarn_options, rope_rotation, transfer_frequencies


def init_mixed_frequencies(depth: int, num_heads: int, head_dim: int, theta: float = 10.0) -> Tensor:
    """(depth, heads, d/2, 2) frequency vectors (fx, fy): the axial ladder rotated by a random angle per head."""
    mag = axial_frequencies(head_dim, theta).float()  # (d/4,)
    phi = torch.rand(depth, num_heads, 1) * 2 * math.pi
    angle = torch.cat([phi.expand(-1, -1, len(mag)), phi.expand(-1, -1, len(mag)) + math.pi / 2], dim=-1)
    mag = torch.cat([mag, mag])  # (d/2,)
    return torch.stack([mag * angle.cos(), mag * angle.sin()], dim=-1)


class Rope2dMixedPos(PosScheme):
    """RoPE with learned 2D frequencies per block and head; a rotation (heads, N, d/2, 2) per block."""

    methods = ("interpolate", "extrapolate", "ntk", "yarn")  # the default (first) chosen on validation: protocol.md
    frame = "grid"

    def __init__(
        self, *, theta: float = 10.0, yarn_alpha: float = YARN_ALPHA, yarn_beta: float = YARN_BETA,
        yarn_temperature: str = "axis", **kw,
    ):  # fmt: skip
        super().__init__(**kw)
        self.theta, self.yarn_alpha, self.yarn_beta = theta, yarn_alpha, yarn_beta
        self.yarn_temperature = check_yarn_options(yarn_alpha, yarn_beta, yarn_temperature)
        self.freqs = nn.Parameter(init_mixed_frequencies(self.depth, self.num_heads, self.head_dim, theta))
        quarter = self.head_dim // 4
        # 4k/d of each pair on the init ladder (both halves share it), for NTK scaling
        self.register_buffer("exponent", 4.0 * (torch.arange(2 * quarter) % quarter) / self.head_dim, persistent=False)

    def frequencies(self, grid: Grid) -> tuple[Tensor, float | Tensor]:
        """(depth, heads, d/2, 2) frequencies (fx, fy) for ``grid`` under the current method, and the logit scale."""
        f = self.freqs.float()  # fp32 whatever the module dtype (the exponent buffer follows .double() too)
        fx, fy = f.unbind(-1)
        fy, fx, scale = transfer_frequencies(
            self.method, fy, fx, grid, self.train_grid, exponent=self.exponent.float(), magnitude=torch.hypot(fx, fy),
            head_dim=self.head_dim, yarn_alpha=self.yarn_alpha, yarn_beta=self.yarn_beta,
            yarn_temperature_mode=self.yarn_temperature,
        )  # fmt: skip
        return torch.stack([fx, fy], dim=-1), scale

    def angles(self, grid: Grid) -> tuple[Tensor, float | Tensor]:
        """(depth, heads, N, d/2) phases x * fx + y * fy in fp32, and the logit scale."""
        device = self.freqs.device
        with torch.autocast(device.type, enabled=False):  # a matmul would otherwise run in bf16
            f, scale = self.frequencies(grid)
            xy = self.coords(grid, device).flip(-1)  # (N, 2) as (x, y), the order of f's last axis
            return torch.einsum("nc,lhkc->lhnk", xy, f), scale

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        def build() -> list[AttnPos]:
            angles, scale = self.angles(grid)
            with torch.autocast(self.freqs.device.type, enabled=False):
                rot = rope_rotation(angles, self.num_prefix_tokens).to(device)  # (depth, heads, P+N, d/2, 2)
            return [AttnPos(rope=r, logit_scale=scale) for r in rot.unbind(0)]

        return self.cached(("rope", tuple(grid), device), build, self.freqs)
