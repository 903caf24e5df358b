"""The position seam: what every position scheme may do to a ViT, and nothing more.

A scheme can act at two hooks (see the README's table):

* ``tokens(x, grid)``: add something to the patch tokens once, before block 0;
* ``attention(grid)``: return, for each block, an :class:`AttnPos` with a q/k rotation
  (cos, sin per rotary pair) and/or an additive logit bias, built once per forward for the current grid.

Every default means "no position". Each scheme also owns how it serves a grid it was not
trained on: ``methods`` names the ways, ``method`` selects one (the evaluator sweeps them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

Grid = tuple[int, int]


@dataclass(frozen=True)
class AttnPos:
    """What one block's attention receives from the scheme.

    rope: (cos, sin) of the angle of each rotary pair, stacked last: (N, head_dim/2, 2) or
          (heads, N, head_dim/2, 2), N including prefix tokens (which get (1, 0): never rotated).
          Pair j of q and k is (x[2j], x[2j+1]); read as complex numbers, rope is e^(i angle).
    bias: (heads, N, N) added to the logits (prefix rows and columns are 0).
    logit_scale: multiplies the usual 1/sqrt(head_dim) (YaRN's attention temperature).
    """

    rope: Tensor | None = None
    bias: Tensor | None = None
    logit_scale: float = 1.0


NO_POS = AttnPos()


class PosScheme(nn.Module):
    """Base class: no position at either hook. Subclasses override what they use.

    Args:
        dim: token width. num_heads, depth: of the ViT it serves.
        grid: the training token grid (rows, cols). num_prefix_tokens: class token(s)
        placed before the patch tokens, which never receive position.
    """

    methods: tuple[str, ...] = ("none",)  # ways to serve a new grid; the first is the default

    def __init__(self, *, dim: int, num_heads: int, depth: int, grid: Grid, num_prefix_tokens: int = 0):
        super().__init__()
        self.dim, self.num_heads, self.depth = dim, num_heads, depth
        self.head_dim = dim // num_heads
        self.train_grid: Grid = (int(grid[0]), int(grid[1]))
        self.num_prefix_tokens = num_prefix_tokens
        self._method = self.methods[0]
        self._cache: dict[tuple, object] = {}
        self.cache_misses = 0  # counted so tests and benchmarks can see recomputation

    # -- transfer method -------------------------------------------------------------
    @property
    def method(self) -> str:
        return self._method

    @method.setter
    def method(self, name: str) -> None:
        if name not in self.methods:
            raise ValueError(f"{type(self).__name__} has no transfer method '{name}'; valid: {', '.join(self.methods)}")
        self._method = name
        self._cache.clear()

    # -- hooks ---------------------------------------------------------------------------
    def tokens(self, x: Tensor, grid: Grid) -> Tensor:
        """x: (B, N, D) patch tokens in row-major grid order -> (B, N, D)."""
        return x

    def attention(self, grid: Grid, device: torch.device | None = None) -> list[AttnPos]:
        """One AttnPos per block for this grid, its tensors on ``device``."""
        return [NO_POS] * self.depth

    def after_block(self, x: Tensor, grid: Grid, index: int) -> Tensor:
        """Hook after block ``index`` (for conditional encodings such as PEG); default: nothing."""
        return x

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of parameters that must not be decayed."""
        return {name for name, _ in self.named_parameters()}

    # -- caching -------------------------------------------------------------------------
    def cached(self, key: tuple, build, *params: Tensor):
        """Return build() cached under key, the method, and the versions of ``params``.

        Differentiable results are only cached when no gradient is recorded, so a
        training step always gets a fresh graph while evaluation never recomputes.
        A learned parameter changed in place (an optimizer step) bumps its ``_version``
        and so misses the cache. Under torch.compile the cache is bypassed: the graph
        builds what it needs itself (a few small ops, fused by the compiler).
        """
        if torch.compiler.is_compiling():
            # data_ptr()/_version are data-dependent (a graph break each), and the cache dict's
            # contents and the miss counter would be guarded on (a recompile per fill, per step).
            return build()
        grad_needed = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        if grad_needed:
            self.cache_misses += 1
            return build()
        full_key = (key, self._method, tuple((p.data_ptr(), p._version) for p in params))
        hit = self._cache.get(full_key)
        if hit is None:
            if len(self._cache) > 32:  # bound memory when sweeping many grids
                self._cache.clear()
            self.cache_misses += 1
            hit = build()
            self._cache[full_key] = hit
        return hit

    def _apply(self, fn, recurse=True):
        self._cache.clear()  # .to(device/dtype) invalidates cached tensors
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True):
        # Fused optimizers (AdamW(fused=True)) change parameters without bumping _version,
        # so entries cached before a training phase must not outlive it.
        self._cache.clear()
        return super().train(mode)


def grid_coords(grid: Grid, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
    """Row and column index of each token in row-major order: two (N,) tensors."""
    h, w = grid
    ys, xs = torch.meshgrid(
        torch.arange(h, device=device, dtype=dtype), torch.arange(w, device=device, dtype=dtype), indexing="ij"
    )
    return ys.flatten(), xs.flatten()


def rotate(x: Tensor, rot: Tensor) -> Tensor:
    """Rotate q or k (B, heads, N, d) by ``rot`` = (cos, sin) per pair, (N, d/2, 2) or (heads, N, d/2, 2).

    Interleaved pairs: (x[2j], x[2j+1]) is the complex number x[2j] + i x[2j+1], multiplied by
    cos + i sin of pair j. ``rot`` broadcasts over the batch: nothing is copied per batch but the result.
    """
    pairs = x.unflatten(-1, (-1, 2))  # (..., d/2, 2): a view
    if x.dtype in (torch.float32, torch.float64) and not (torch.compiler.is_compiling() or torch.jit.is_tracing()):
        # One complex multiply reads x once and writes once, forward and backward: the rotation is
        # memory-bound on the CPU, and this halves its cost against x*cos + swap(x)*sin (benchmarks/).
        if pairs.stride(-1) != 1 or pairs.storage_offset() % 2 or any(st % 2 for st in pairs.stride()[:-1]):
            pairs = pairs.contiguous()  # view_as_complex needs adjacent pairs, even strides and offset
        turn = torch.view_as_complex(rot.to(x.dtype).contiguous())
        return torch.view_as_real(torch.view_as_complex(pairs) * turn).flatten(-2)
    # bf16/fp16 have no complex dtype, inductor (no complex codegen) fuses this real form itself, and ONNX
    # (torch.export / torch.onnx / jit tracing) has no complex type.
    cos, sin = rot.to(x.dtype).unbind(-1)
    x1, x2 = pairs.unbind(-1)
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
