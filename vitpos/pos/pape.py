"""`pape`: PaPE (Koo Øhrstrøm et al. 2026, "Where to Attend: A Principled Vision-Centric Position Encoding with
Parabolas", arXiv 2602.01418), a sum of learnable parabolas of the query-key offset added to the attention logits.

Per block and head, M parabolas (``pape_parabolas``, default 50 as the authors' code), each along its own learned
direction w_m in the (y, x) plane. With d = key - query, the offset in patches, and u_m = w_m . d its projection:

    bias(query, key) = -(1 / sqrt(head_dim)) * sum_m [ a_m u_m^2 + b_m u_m ],   a_m = softplus(alpha_m) >= 0,

so every parabola opens downwards: attention decays with distance along each direction (a_m) while its vertex, where
it attends most, may sit off the query (b_m: directionality). The 1/sqrt(head_dim) is the logit scale the authors'
code applies to the bias, which it adds through extra q and k channels. A sum of such parabolas is one concave
quadratic of the offset, -(d^T A d + v^T d) / sqrt(head_dim) with A = sum_m a_m w_m w_m^T and v = sum_m b_m w_m,
and is computed that way (one product of five coefficients with five monomials of the offset per head). The bias
depends on the offset alone: it is translation-invariant, on any grid.

Sources and assumptions. The form is read from the paper's Figure 1 ("an attention bias based on a sum of learnable
parabolas with the relative position between tokens as the dependent variable") and from the authors' reference code
(github.com/DTU-PAS/parabolic-position-encoding, ``pape/nn/positions/pape.py``); the paper's method section was not
available to read. There, a_m and b_m are linear maps of the query token's layer-normed input ("context awareness"),
so the bias differs per image. vitpos's seam hands every block one bias per grid, computed before the tokens exist,
so here alpha_m and b_m are learned per block, head and parabola instead: PaPE without its context awareness. They
start drawn from N(0, 1/3), the spread the reference's projection (torch's Linear init) gives a layer-normed token;
the directions start as torch's Linear(2, heads * M) does, uniform in +-1/sqrt(2). Coordinates are integer patch
positions, as the reference's default (its position normalisation off).

Methods for a grid other than the training one:

* ``scaled`` (the default, chosen on validation: docs/protocol.md): offsets x training grid / new grid per axis, so
  the whole image spans the offsets seen in training (what the reference's position normalisation does at a new grid);
* ``extrapolate`` (as the reference's integer positions): the same parabolas at the new grid's offsets; longer
  offsets reach further down each parabola.

The bias is computed in fp32 with autocast off, per block (depth, heads, N, N) for the current grid, from the patch
coordinates of the seam (augmented in training). With a class token, each block and head learns the bias between it
and the patches (``prefix_bias``, as BEiT and ``fire``), zero at init: the bias of a patch's own position. (The
reference places its class token at a corner position just outside the grid instead.) All parameters are position
parameters (no plain weight decay).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .alibi2d import scaled_offsets
from .base import AttnPos, Grid, PosScheme, add_prefix_bias, prefix_bias_param

INIT_STD = 3**-0.5  # alpha, b at init: the std of a Linear(D, .) output (uniform +-1/sqrt(D)) on a layer-normed token


def parabola_coefficients(direction: Tensor, curvature: Tensor, slope: Tensor) -> Tensor:
    """(..., 5) coefficients of (dy^2, 2 dy dx, dx^2, dy, dx) in sum_m a_m (w_m . d)^2 + b_m (w_m . d).

    direction: (..., M, 2) w_m as (y, x); curvature: (..., M) alpha_m, a_m = softplus(alpha_m); slope: (..., M) b_m.
    """
    a = F.softplus(curvature)
    quad = torch.einsum("...m,...mi,...mj->...ij", a, direction, direction)  # (..., 2, 2) A, symmetric
    lin = torch.einsum("...m,...mi->...i", slope, direction)  # (..., 2) v
    return torch.stack([quad[..., 0, 0], quad[..., 0, 1], quad[..., 1, 1], lin[..., 0], lin[..., 1]], dim=-1)


def offset_monomials(dy: Tensor, dx: Tensor) -> Tensor:
    """(N, N, 5) the monomials (dy^2, 2 dy dx, dx^2, dy, dx) of (N, N) offsets, in parabola_coefficients' order."""
    return torch.stack([dy * dy, 2 * dy * dx, dx * dx, dy, dx], dim=-1)


class PaPEPos(PosScheme):
    """Per block and head a sum of concave parabolas of the projected offset, added to the logits."""

    methods = ("scaled", "extrapolate")  # scaled first: chosen on validation (docs/protocol.md)
    frame = "grid"

    def __init__(self, *, pape_parabolas: int = 50, **kw):
        super().__init__(**kw)
        if isinstance(pape_parabolas, bool) or not (isinstance(pape_parabolas, int) and pape_parabolas >= 1):
            raise ValueError(f"pape_parabolas must be a positive integer, got {pape_parabolas!r}")
        shape = (self.depth, self.num_heads, pape_parabolas)
        self.direction = nn.Parameter(torch.empty(*shape, 2).uniform_(-(2**-0.5), 2**-0.5))
        self.curvature = nn.Parameter(torch.randn(shape) * INIT_STD)
        self.slope = nn.Parameter(torch.randn(shape) * INIT_STD)
        self.prefix_bias = prefix_bias_param(self.depth, self.num_heads, self.num_prefix_tokens, init=0.0)

    def params(self) -> list[Tensor]:
        return [p for p in (self.direction, self.curvature, self.slope, self.prefix_bias) if p is not None]

    def bias(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, P+N) fp32 bias for ``grid`` under the current method."""
        device = self.direction.device
        with torch.autocast(device.type, enabled=False):
            dy, dx = scaled_offsets(self, grid, self.method == "scaled", device)  # (N, N) each, key minus query
            monomials = offset_monomials(dy.float(), dx.float())  # (N, N, 5)
            coef = parabola_coefficients(self.direction.float(), self.curvature.float(), self.slope.float())
            coef = coef * (-1 / math.sqrt(self.head_dim))  # (depth, heads, 5)
            out = torch.einsum("lhc,nkc->lhnk", coef, monomials)  # (depth, heads, N, N)
            return add_prefix_bias(out.contiguous(), self.prefix_bias, self.num_prefix_tokens).contiguous()

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        bias = self.cached(("bias", tuple(grid), device), lambda: self.bias(grid).to(device), *self.params())
        return [AttnPos(bias=b) for b in bias.unbind(0)]
