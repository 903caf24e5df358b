"""`liere`: LieRE (Ostmeier et al., ICML 2025), q/k rotations that are matrix exponentials of learned generators.

Every block and head owns two skew-symmetric generators per b x b block of its channels, G_y and G_x
(d/b blocks of a head of width d). The token at position p = (y, x) turns q and k by

    R(p) = exp(y G_y + x G_x),  block-diagonal, each block in SO(b),

so the logit between tokens at p and q is (R(p) q_i)^T (R(q) k_j) = q_i^T R(p)^T R(q) k_j. With b = 2
this is RoPE-Mixed (one learned 2D frequency per pair); a larger b lets a head rotate in a dense
b-dimensional space. The default b is the whole head (LieRE's dense generators, the paper's best:
block size 64 in its ViT-B); ``block_size`` picks a smaller one.

``generators`` picks how G_y and G_x are parameterised:

* ``free`` (the default): LieRE's, two independent generators per block;
* ``ap`` and ``ld``: ComRoPE's (Yu et al., CVPR 2025, "ComRoPE: Scalable and Robust Rotary Position Embedding
  Parameterized by Trainable Commuting Angle Matrices"), two families whose generators commute by construction.
  With one learned skew-symmetric B_j per block j (j = 0 .. d/b - 1),

      ap (axial partition):   block j of G_y is B_j for even j, 0 for odd j; block j of G_x the reverse,
      ld (linearly dependent): block j of G_y is s_yj B_j, block j of G_x is s_xj B_j, s_yj, s_xj learned scalars.

  In ``ap`` every block turns with one axis only (an even number of blocks; default b = d/2, one block per
  axis), in ``ld`` block j turns by exp(t B_j) at t = s_yj y + s_xj x: a block sees position only along its
  direction (s_yj, s_xj), so a head of one block (the default b = d) sees one direction, and smaller blocks
  see several. As in the reference (Longin-Yu/ComRoPE), the entries of B_j
  start as those of P - P^T with P ~ N(0, 1), and the scalars as N(0, 1); there they are shared by a layer's
  heads, here each head owns its own (a head of one block then still has a direction of its own).

Which relative property holds (checked by tests):

* R(p)^T R(q) = R(q - p) whenever the generators of a head commute, G_y G_x = G_x G_y: then the logit
  depends on the offset q - p alone, as RoPE's does. ComRoPE shows the converse: for all p and q it needs
  them to commute. ``ap`` and ``ld`` commute for every value of their parameters (a block turned by one
  axis, or by multiples of one matrix), so they are exactly relative everywhere, whatever they learn.
* ``free`` with b = 2 always commutes (so(2) is one-dimensional): LieRE with b = 2 is exactly relative.
* ``free`` with b > 2: learned generators do not commute in general, and the logit also depends on where
  the pair sits: LieRE encodes absolute position as well as relative. It stays exactly relative for
  positions on one line through the origin (token (0, 0)): y G_y + x G_x for p = s u and q = t u are
  multiples of one matrix, which commute, so along the first row, the first column or the main diagonal
  it is relative.
* Always: R(p) is orthogonal (norms of q and k are kept), R(0) = I, and R(-p) = R(p)^T.

Positions are in units of the training grid, as in StanfordMIMI/LieRE: token (i, j) of the training
grid (H, W) sits at (i / (H-1), j / (W-1)), so the training grid spans [0, 1] per axis. ``free`` generator
entries start uniform in [0, 2 pi), as the reference (after RoPE-Mixed's random angles). The generators
are built and exponentiated in fp32 with autocast off (through an eigendecomposition, see
:class:`SkewExp`). No plain weight decay on them: the position rule's pull towards their start instead.

Methods for a new grid (h, w):

* ``interpolate`` (the default, chosen on validation: docs/protocol.md): the new grid squeezed onto [0, 1],
  i / (h-1);
* ``extrapolate``: the training spacing, i / (H-1): a larger grid reaches beyond 1.

(The reference spans [0, h/H] with h points, a spacing between the two.)

Prefix tokens (a class token) get the identity: never rotated.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import AttnPos, Grid, PosScheme

GENERATORS = ("free", "ap", "ld")  # LieRE's free generators, ComRoPE's axial partition and linearly dependent ones
SKEW_STD = math.sqrt(2.0)  # the entries of P - P^T for P ~ N(0, 1): ComRoPE's start


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

    methods = ("interpolate", "extrapolate")
    frame = "grid"

    def __init__(self, *, block_size: int | None = None, generators: str = "free", **kw):
        super().__init__(**kw)
        if generators not in GENERATORS:
            raise ValueError(f"liere generators must be one of {', '.join(GENERATORS)}, got {generators!r}")
        self.kind = generators
        d = self.head_dim
        b = (d // 2 if generators == "ap" else d) if block_size is None else int(block_size)
        if b < 2 or d % b:
            raise ValueError(f"liere block_size must be at least 2 and divide the head dim {d}, got {b}")
        k, m = d // b, b * (b - 1) // 2
        if generators == "ap" and k % 2:
            raise ValueError(f"liere generators=ap splits a head's blocks between the two axes: block_size must "
                             f"divide half the head dim {d}, got {b}")  # fmt: skip
        self.block_size = b
        shape = (self.depth, self.num_heads)
        if generators == "free":
            # (depth, heads, 2 axes (y, x), d/b blocks, b(b-1)/2 upper-triangle entries)
            self.generators = nn.Parameter(torch.rand(*shape, 2, k, m) * (2 * math.pi))
        elif generators == "ap":
            # (depth, heads, 2 axes, d/2b blocks per axis, entries): axis a turns blocks a, a + 2, a + 4, ...
            self.generators = nn.Parameter(torch.randn(*shape, 2, k // 2, m) * SKEW_STD)
        else:
            # (depth, heads, 1: shared by the axes, d/b blocks, entries) and per axis and block a scale
            self.generators = nn.Parameter(torch.randn(*shape, 1, k, m) * SKEW_STD)
            self.axis_scales = nn.Parameter(torch.randn(*shape, 2, k))

    def skew(self) -> Tensor:
        """(depth, heads, 2, d/b, b, b) generators G_y, G_x, in at least fp32."""
        g = self.generators
        s = skew_from_coefficients(g.to(torch.promote_types(g.dtype, torch.float32)), self.block_size)
        if self.kind == "ap":  # block 2i + c is axis a's i-th matrix where c == a, else 0
            eye = torch.eye(2, dtype=s.dtype, device=s.device)
            return torch.einsum("lhaiuv,ac->lhaicuv", s, eye).flatten(3, 4)
        if self.kind == "ld":  # (depth, heads, 1, d/b, b, b) times the scales (depth, heads, 2, d/b)
            return s * self.axis_scales.to(s.dtype)[..., None, None]
        return s

    def state_at_grid(self, grid: Grid) -> dict[str, Tensor]:
        """Rebuilt at ``grid``, token i sits at i / (h-1). ``extrapolate`` keeps the training spacing
        i / (H-1): the generators are scaled by (h-1) / (H-1) per axis so that y G_y is unchanged.
        ``interpolate`` is what the new grid serves as its own training grid: nothing to change."""
        state = super().state_at_grid(grid)
        if self.method == "extrapolate":
            (big_h, big_w), (h, w) = self.train_grid, grid
            scale = torch.tensor([(h - 1) / max(big_h - 1, 1), (w - 1) / max(big_w - 1, 1)])
            name = "axis_scales" if self.kind == "ld" else "generators"  # what carries the axis (y, x)
            g = state[name]
            state[name] = g * scale.to(g.dtype).view(1, 1, 2, *[1] * (g.dim() - 3))
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

        return self.cached(("rotation", tuple(grid), device), build, *self.parameters())
