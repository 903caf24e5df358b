"""`liere`: LieRE (Ostmeier et al., ICML 2025), q/k rotations that are matrix exponentials of learned generators.

Every block and head owns two skew-symmetric generators per b x b block of its channels, G_y and G_x
(d/b blocks of a head of width d). The token at position p = (y, x) turns q and k by

    R(p) = exp(y G_y + x G_x),  block-diagonal, each block in SO(b),

so the logit between tokens at p and q is (R(p) q_i)^T (R(q) k_j) = q_i^T R(p)^T R(q) k_j. With b = 2
this is RoPE-Mixed (one learned 2D frequency per pair); a larger b lets a head rotate in a dense
b-dimensional space. The default b is the whole head (LieRE's dense generators, the paper's best:
block size 64 in its ViT-B); ``block_size`` picks a smaller one.

Which relative property holds (checked by tests):

* R(p)^T R(q) = R(q - p) whenever the generators of a head commute, G_y G_x = G_x G_y: then the logit
  depends on the offset q - p alone, as RoPE's does. For b = 2 they always commute (so(2) is
  one-dimensional): LieRE with b = 2 is exactly relative.
* For b > 2 learned generators do not commute in general, and the logit also depends on where the pair
  sits: LieRE encodes absolute position as well as relative. It stays exactly relative for positions on
  one line through the origin (token (0, 0)): y G_y + x G_x for p = s u and q = t u are multiples of one
  matrix, which commute, so along the first row, the first column or the main diagonal it is relative.
* Always: R(p) is orthogonal (norms of q and k are kept), R(0) = I, and R(-p) = R(p)^T.

Positions are in units of the training grid, as in StanfordMIMI/LieRE: token (i, j) of the training
grid (H, W) sits at (i / (H-1), j / (W-1)), so the training grid spans [0, 1] per axis. Generator
entries start uniform in [0, 2 pi), as the reference (after RoPE-Mixed's random angles). The generators
are built and exponentiated in fp32 with autocast off (through an eigendecomposition, see
:class:`SkewExp`). No plain weight decay on them: the position rule's pull towards their start instead.

Methods for a new grid (h, w):

* ``extrapolate``: the training spacing, i / (H-1): a larger grid reaches beyond 1;
* ``interpolate``: the new grid squeezed onto [0, 1], i / (h-1).

(The reference spans [0, h/H] with h points, a spacing between the two.)

Prefix tokens (a class token) get the identity: never rotated.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme


class SkewExp(torch.autograd.Function):
    """exp(A) for real skew-symmetric A (..., b, b), through the eigendecomposition of the Hermitian -iA.

    -iA = V diag(w) V^H with w real, so exp(A) = V diag(e^(iw)) V^H. The gradient is the adjoint Frechet
    derivative in the same basis (Daleckii-Krein): dA = Re(V (F o (V^H G V)) V^H), F_jk the divided
    difference of exp at i w_j, i w_k, written e^(-i(w_j + w_k)/2) sinc((w_j - w_k)/2) so that equal
    eigenvalues (A = 0 at the origin token) need no special case. On the CPU this is about 2.5 times
    faster than torch.linalg.matrix_exp forward and backward for 32 x 32 blocks (whose backward
    exponentiates a 2b x 2b matrix), and as exact.
    """

    @staticmethod
    def forward(ctx, a: Tensor) -> Tensor:
        cdtype = torch.complex128 if a.dtype == torch.float64 else torch.complex64
        w, v = torch.linalg.eigh(-1j * a.to(cdtype))
        ctx.save_for_backward(w, v)
        return ((v * torch.exp(1j * w)[..., None, :]) @ v.mH).real.to(a.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        w, v = ctx.saved_tensors
        half_gap = (w[..., :, None] - w[..., None, :]) / 2
        f = torch.exp(-0.5j * (w[..., :, None] + w[..., None, :])) * torch.sinc(half_gap / math.pi)
        return (v @ (f * (v.mH @ grad.to(v.dtype) @ v)) @ v.mH).real.to(grad.dtype)


def skew_exp_series(a: Tensor, squarings: int = 10, order: int = 12) -> Tensor:
    """exp(A) by scaling and squaring a Taylor series, in fp64: matmuls only, for graphs exported to ONNX,
    which has neither eigh on complex numbers nor matrix_exp. A fixed number of squarings keeps the graph free
    of data-dependent control flow; with 2^10 and order 12 the truncation error stays below 1e-7 up to
    ||A|| = 1000 (positions times generator norms are far smaller)."""
    x = a.double() / 2**squarings
    eye = torch.eye(a.shape[-1], dtype=x.dtype, device=x.device).expand_as(x)
    out = term = eye
    for k in range(1, order + 1):
        term = term @ x / k
        out = out + term
    for _ in range(squarings):
        out = out @ out
    return out.to(a.dtype)


def skew_exp(a: Tensor) -> Tensor:
    """exp of real skew-symmetric matrices (..., b, b): :class:`SkewExp`, or matrix_exp where complex
    numbers cannot go (torch.compile's generated code has no complex type), or a series when exporting."""
    if torch.compiler.is_exporting() or torch.jit.is_tracing():
        return skew_exp_series(a)
    if torch.compiler.is_compiling():
        return torch.linalg.matrix_exp(a.contiguous())  # matrix_exp views its input flat
    return SkewExp.apply(a)


def skew_from_coefficients(coeffs: Tensor, b: int) -> Tensor:
    """(..., b(b-1)/2) upper-triangle entries -> (..., b, b) skew-symmetric matrices A with A^T = -A."""
    rows, cols = torch.triu_indices(b, b, offset=1, device=coeffs.device)
    upper = coeffs.new_zeros(*coeffs.shape[:-1], b, b)
    upper[..., rows, cols] = coeffs
    return upper - upper.transpose(-1, -2)


class LiePos(PosScheme):
    """Learned Lie-algebra rotations of q and k per block and head; a (heads, N, d/b, b, b) rotation per block."""

    methods = ("extrapolate", "interpolate")
    frame = "grid"

    def __init__(self, *, block_size: int | None = None, **kw):
        super().__init__(**kw)
        b = self.head_dim if block_size is None else int(block_size)
        if b < 2 or self.head_dim % b:
            raise ValueError(f"liere block_size must be at least 2 and divide the head dim {self.head_dim}, got {b}")
        self.block_size = b
        k, m = self.head_dim // b, b * (b - 1) // 2
        # (depth, heads, 2 axes (y, x), d/b blocks, b(b-1)/2 upper-triangle entries)
        self.generators = nn.Parameter(torch.rand(self.depth, self.num_heads, 2, k, m) * (2 * math.pi))

    def skew(self) -> Tensor:
        """(depth, heads, 2, d/b, b, b) generators G_y, G_x, in at least fp32."""
        g = self.generators
        return skew_from_coefficients(g.to(torch.promote_types(g.dtype, torch.float32)), self.block_size)

    def state_at_grid(self, grid: Grid) -> dict[str, Tensor]:
        """Rebuilt at ``grid``, token i sits at i / (h-1). ``extrapolate`` keeps the training spacing
        i / (H-1): the generators are scaled by (h-1) / (H-1) per axis so that y G_y is unchanged.
        ``interpolate`` is what the new grid serves as its own training grid: nothing to change."""
        state = super().state_at_grid(grid)
        if self.method == "extrapolate":
            (big_h, big_w), (h, w) = self.train_grid, grid
            scale = torch.tensor([(h - 1) / max(big_h - 1, 1), (w - 1) / max(big_w - 1, 1)])
            g = state["generators"]
            state["generators"] = g * scale.to(g.dtype).view(1, 1, 2, 1, 1)
        return state

    def positions(self, grid: Grid, device=None) -> Tensor:
        """(N, 2) positions (y, x) of the tokens of ``grid`` in units of the training grid (or the new one)."""
        ref = self.train_grid if self.method == "extrapolate" else grid
        ys, xs = self.coords(grid, device).unbind(-1)
        return torch.stack([ys / max(ref[0] - 1, 1), xs / max(ref[1] - 1, 1)], dim=-1)

    def rotations(self, grid: Grid) -> Tensor:
        """(depth, heads, P+N, d/b, b, b) block rotations exp(y G_y + x G_x); prefix rows are the identity."""
        device = self.generators.device
        with torch.autocast(device.type, enabled=False):
            skew = self.skew()
            pos = self.positions(grid, device).to(skew.dtype)
            algebra = torch.einsum("nc,lhckij->lhnkij", pos, skew)  # (depth, heads, N, d/b, b, b)
            rot = skew_exp(algebra)
            p = self.num_prefix_tokens
            if p:
                eye = torch.eye(self.block_size, device=device, dtype=rot.dtype)
                ident = eye.expand(*rot.shape[:2], p, *rot.shape[3:])
                rot = torch.cat([ident, rot], dim=2)
            return rot

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        def build() -> list[AttnPos]:
            return [AttnPos(rotation=r) for r in self.rotations(grid).to(device).unbind(0)]

        return self.cached(("rotation", tuple(grid), device), build, self.generators)
