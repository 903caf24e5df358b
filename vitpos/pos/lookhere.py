"""`lookhere`: LookHere (Fuller et al., NeurIPS 2024), directed attention masks plus a distance penalty.

Each head looks in one 2D direction: a key outside the head's field of view is masked (-inf on the
logit), a key inside it costs -s * d(i, j), with d the Euclidean distance between patch centres in
patch units. The field of view always contains the query itself, so no row is fully masked. Masks
and penalties depend only on the offset (key minus query), so the bias is translation-equivariant;
there are no learned parameters.

Fields of view (``fov``; y grows downwards), the directions of GreenCUBIC/lookhere's masks:

* 180 (LH-180, "halves"): up dy <= 0, down dy >= 0, left dx <= 0, right dx >= 0;
* 90 (LH-90, "triangles"): cones centred on the axes, up -dy >= |dx|, down dy >= |dx|, left
  -dx >= |dy|, right dx >= |dy| (diagonals included);
* 45 (LH-45, "eighths"): each 90 degree cone split at its axis into two 45 degree wedges, eight fields.

Head h takes field h mod F (F = 4 or 8 fields) and the slope 2^-(1 + h // F): the first F heads 1/2,
the next F 1/4, ..., as the reference's per-head slopes. Block l multiplies by a layer slope, linearly
spaced from ``layer_slopes[0]`` (first block) to ``layer_slopes[1]`` (last), and every block by
``global_slope``. The released models keep these two in their checkpoints' configs, which the code
does not list; both default to 1 here. With fewer than F heads some directions have no head (the
default 3-head ViT sees up, down and left at 180 degrees, which still covers the whole image).

Prefix tokens (a class token) get zero rows and columns, as in the reference: unmasked, no penalty.

On FlexAttention (``vitpos.attention``) the fields of view also go to the kernel as a block mask, so that key blocks
a head cannot see are skipped rather than computed and masked.

Methods for a new grid, as ``alibi2d``: ``extrapolate`` (offsets as they are) and ``scaled`` (offsets
scaled per axis by the training grid over the new one, for masks and distances alike).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..attention import block_mask_of, uses_flex
from .alibi2d import pad_prefix, scaled_offsets
from .base import AttnPos, Grid, PosScheme


def _fields(dy: Tensor, dx: Tensor, fov: int) -> list[Tensor]:
    """Boolean (N, N) masks of what each field of view sees, for offsets (dy, dx) (key minus query)."""
    up, down, left, right = dy <= 0, dy >= 0, dx <= 0, dx >= 0
    if fov == 180:
        return [up, down, left, right]
    cone_up, cone_down = -dy >= dx.abs(), dy >= dx.abs()
    cone_left, cone_right = -dx >= dy.abs(), dx >= dy.abs()
    if fov == 90:
        return [cone_up, cone_down, cone_left, cone_right]
    return [  # 45: each cone halved at its axis
        cone_up & left, cone_down & left, cone_left & up, cone_right & up,
        cone_up & right, cone_down & right, cone_left & down, cone_right & down,
    ]  # fmt: skip


def lookhere_bias(
    dy: Tensor, dx: Tensor, *, num_heads: int, depth: int, fov: int, global_slope: float, layer_slopes
) -> Tensor:
    """(depth, heads, N, N) bias for offsets (dy, dx): -slope * distance inside each head's field, -inf outside."""
    fields = _fields(dy, dx, fov)
    n_fields = len(fields)
    visible = torch.stack([fields[h % n_fields] for h in range(num_heads)])  # (heads, N, N)
    head_slope = torch.tensor([2.0 ** -(1 + h // n_fields) for h in range(num_heads)], dtype=torch.float64)
    layer = torch.linspace(layer_slopes[0], layer_slopes[1], depth, dtype=torch.float64)
    slope = global_slope * layer[:, None] * head_slope[None, :]  # (depth, heads)
    dist = (dy * dy + dx * dx).sqrt()  # not hypot, which ONNX has no kernel for
    penalty = -slope.to(dy.device)[:, :, None, None] * dist  # (depth, heads, N, N)
    return penalty.masked_fill(~visible, float("-inf"))


class LookHerePos(PosScheme):
    """Directed attention masks and distance penalties per head and block; no parameters."""

    methods = ("extrapolate", "scaled")
    frame = "grid"

    def __init__(
        self, *, fov: int = 180, global_slope: float = 1.0, layer_slopes: tuple[float, float] = (1.0, 1.0), **kw
    ):
        super().__init__(**kw)
        if fov not in (180, 90, 45):
            raise ValueError(f"lookhere fov must be 180, 90 or 45 degrees, got {fov}")
        if global_slope < 0 or min(layer_slopes) < 0:
            raise ValueError("lookhere slopes must be non-negative (a penalty, not a reward, for distance)")
        self.fov, self.global_slope, self.layer_slopes = fov, float(global_slope), tuple(layer_slopes)

    def bias(self, grid: Grid, device=None) -> Tensor:
        """(depth, heads, P+N, P+N) fp32 bias for ``grid`` under the current method."""
        dy, dx = scaled_offsets(self, grid, self.method == "scaled", device)
        bias = lookhere_bias(
            dy, dx, num_heads=self.num_heads, depth=self.depth, fov=self.fov,
            global_slope=self.global_slope, layer_slopes=self.layer_slopes,
        )  # fmt: skip
        return pad_prefix(bias.float(), self.num_prefix_tokens)

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        bias = self.cached(("bias", tuple(grid), device), lambda: self.bias(grid, device))
        mask = None
        # on FlexAttention the fields of view also go in as a block mask: the key blocks a head never sees are skipped
        if uses_flex(bias.device, bias.shape[-1]):
            mask = self.cached(("block_mask", tuple(grid), device), lambda: block_mask_of(bias.isfinite().any(0)))
        return [AttnPos(bias=b, block_mask=mask) for b in bias.unbind(0)]
