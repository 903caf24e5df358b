"""`fire`: FIRE (Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long Context
Transformers") brought to 2D, a learned function of normalised offsets added to the attention logits.

In 1D FIRE adds b(i, j) = f_theta(psi(i - j) / psi(max(L, i))) to the logit of query i and key j, with
psi(x) = log(c x + 1), f_theta a small MLP and c, L learned. The causal query i sees keys back to position 0, so i
is its distance to the farthest key: dividing by psi(max(L, i)) maps every offset into [0, 1] whatever the length
("progressive interpolation"), which is what extrapolates; L keeps short contexts from being stretched.

In 2D attention is bidirectional along both axes, so each axis a in (y, x) takes the offset d_a = a_key - a_query
and the query's distance to the farthest token on the key's side, r_a = a_query - min(a) for d_a < 0 and
max(a) - a_query for d_a > 0 (on an h-row grid with integer rows: y_query, or h - 1 - y_query). The MLP,
2 -> hidden -> heads with a ReLU, reads the signed, normalised offsets

    u_a = sign(d_a) psi(|d_a|) / (psi(max(|L|, r_a)) + eps),   each in [-1, 1],

    bias(query, key) = f_theta(u_y, u_x),

so the bias depends on the offset and on where the query sits between the grid's edges, never on the grid's size
as such. Every block owns its MLP, c and L (depth of each, shared by the heads: FIRE's layer-wise sharing).
Initialisation: the MLP as torch's nn.Linear (uniform in +-1/sqrt(fan_in), FIRE's reference), c = ``fire_c``
(0.1, FIRE's), L = ``fire_threshold`` patches (default: a quarter of the training grid's longer side, as FIRE's
512 of 2048 tokens). All are position parameters (no plain weight decay).

Methods for a grid other than the training one:

* ``progressive`` (the default): the formula above on the new grid; nothing is resized or rescaled, the
  normalisation serves any grid;
* ``extrapolate`` (the ablation, progressive interpolation off beyond the trained range): r_a is capped at the
  largest the training grid has (its side - 1), so the training grid is served exactly as trained and longer
  offsets reach beyond [-1, 1], outside what the MLP saw.

The bias is computed in fp32 with autocast off, per block (depth, heads, N, N) for the current grid, from the patch
coordinates of the seam (augmented in training: offsets and edges move with them). With a class token, each block
and head learns the bias between it and the patches (``prefix_bias``, as BEiT), zero at init.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme, add_prefix_bias, coord_offsets, prefix_bias_param

EPS = 1e-6  # FIRE's: keeps the normaliser positive for a query on an edge (r = 0) with L near 0


def fire_inputs(c: Tensor, log_scale: Tensor, threshold: Tensor, cap: Tensor | None = None) -> Tensor:
    """(depth, N, N, 2) normalised offsets (u_y, u_x) of every query-key pair for coordinates ``c`` (N, 2).

    log_scale, threshold: (depth,) FIRE's c and L per block. cap: (2,) largest distance to an edge per axis (the
    ``extrapolate`` ablation), or None.
    """
    dy, dx = coord_offsets(c)
    d = torch.stack([dy, dx], dim=-1)  # (N, N, 2) key minus query
    lo, hi = c.min(0).values, c.max(0).values  # (2,) the grid's edges
    reach = torch.where(d < 0, c[:, None, :] - lo, hi - c[:, None, :])  # (N, N, 2) query to the edge on the key's side
    if cap is not None:
        reach = torch.minimum(reach, cap)
    scale = log_scale.abs()[:, None, None, None]  # (depth, 1, 1, 1)

    def psi(x: Tensor) -> Tensor:
        return torch.log(scale * x + 1.0)

    norm = psi(torch.maximum(reach, threshold.abs()[:, None, None, None])) + EPS  # (depth, N, N, 2)
    return torch.sign(d) * psi(d.abs()) / norm


class FirePos(PosScheme):
    """Per block an MLP over FIRE's normalised 2D offsets, added to the logits; nothing sized by the grid."""

    methods = ("progressive", "extrapolate")
    frame = "grid"

    def __init__(self, *, fire_hidden: int = 32, fire_c: float = 0.1, fire_threshold: float | None = None, **kw):
        super().__init__(**kw)
        if fire_hidden < 1:
            raise ValueError(f"fire_hidden must be a positive integer, got {fire_hidden}")
        threshold = max(self.train_grid) / 4 if fire_threshold is None else float(fire_threshold)
        for name, value in (("fire_c", fire_c), ("fire_threshold", threshold)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value}")
        depth, heads = self.depth, self.num_heads

        def linear(*shape: int, fan_in: int) -> nn.Parameter:  # nn.Linear's default init, stacked per block
            bound = 1 / math.sqrt(fan_in)
            return nn.Parameter(torch.empty(depth, *shape).uniform_(-bound, bound))

        self.w1, self.b1 = linear(2, fire_hidden, fan_in=2), linear(fire_hidden, fan_in=2)
        self.w2, self.b2 = linear(fire_hidden, heads, fan_in=fire_hidden), linear(heads, fan_in=fire_hidden)
        self.log_scale = nn.Parameter(torch.full((depth,), float(fire_c)))
        self.threshold = nn.Parameter(torch.full((depth,), threshold))
        self.prefix_bias = prefix_bias_param(depth, heads, self.num_prefix_tokens, init=0.0)

    def params(self) -> list[Tensor]:
        return [p for p in (self.w1, self.b1, self.w2, self.b2, self.log_scale, self.threshold, self.prefix_bias)
                if p is not None]  # fmt: skip

    def inputs(self, grid: Grid) -> Tensor:
        """(depth, N, N, 2) the MLP's inputs (u_y, u_x) on ``grid`` under the current method."""
        c = self.coords(grid, self.w1.device)
        cap = None
        if self.method == "extrapolate":
            cap = torch.tensor([self.train_grid[0] - 1.0, self.train_grid[1] - 1.0], device=c.device)
        return fire_inputs(c, self.log_scale.float(), self.threshold.float(), cap)

    def bias(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, P+N) fp32 bias; prefix rows and columns from ``prefix_bias``."""
        with torch.autocast(self.w1.device.type, enabled=False):
            u = self.inputs(grid)
            hidden = torch.relu(torch.einsum("lijc,lch->lijh", u, self.w1.float()) + self.b1.float()[:, None, None])
            out = torch.einsum("lijh,lhk->lkij", hidden, self.w2.float()) + self.b2.float()[:, :, None, None]
            return add_prefix_bias(out.contiguous(), self.prefix_bias, self.num_prefix_tokens).contiguous()

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        bias = self.cached(("bias", tuple(grid), device), lambda: self.bias(grid).to(device), *self.params())
        return [AttnPos(bias=b) for b in bias.unbind(0)]
