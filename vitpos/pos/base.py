"""The position seam: what every position scheme may do to a ViT, and nothing more.

A scheme can act at two hooks (see the README's table):

* ``tokens(x, grid)``: add something to the patch tokens once, before block 0;
* ``attn_pos(grid)``: return, for each block, an :class:`AttnPos` with a q/k rotation
  (cos, sin per rotary pair, or orthogonal matrices per channel block) and/or an additive logit bias,
  built once per forward for the current grid.

Every default means "no position". Each scheme also owns how it serves a grid it was not
trained on: ``methods`` names the ways, ``method`` selects one (the evaluator sweeps them).

Patch coordinates come from one place, :meth:`PosScheme.coords`: integer grid positions (``frame`` "grid"),
or patch centres normalised onto [-1, 1] (DINOv3's frames "separate", "min", "max") where a scheme is built
that way. Position augmentation (:class:`PosAug`: DINOv3's shift, jitter and rescale, ViTAR's fuzzy offsets)
acts there, in training mode only; evaluation is deterministic. A scheme that reads no coordinates (a table of
integer offsets, a convolution, nothing) has ``frame`` None and refuses augmentation.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, fields

import torch
from einops import rearrange
from torch import Tensor, nn

Grid = tuple[int, int]


@dataclass(frozen=True)
class AttnPos:
    """What one block's attention receives from the scheme.

    rope: (cos, sin) of the angle of each rotary pair, stacked last: (N, head_dim/2, 2) or
          (heads, N, head_dim/2, 2), N including prefix tokens (which get (1, 0): never rotated).
          Pair j of q and k is (x[2j], x[2j+1]); read as complex numbers, rope is e^(i angle).
    bias: (heads, N, N) added to the logits (prefix rows and columns are 0).
    logit_scale: multiplies the usual 1/sqrt(head_dim) (YaRN's attention temperature); a 0-d tensor only where
          the grid is symbolic (``torch.export``).
    rotation: a general q/k rotation, block-diagonal with blocks of size b: (N, d/b, b, b) or
          (heads, N, d/b, b, b) orthogonal matrices, block j turning (x[jb], ..., x[jb+b-1]); prefix rows
          are the identity. ``rope`` is the special case b = 2 kept apart because a complex multiply
          is far cheaper than a matrix product. A scheme sets at most one of the two.
    mix: a linear map per head, (heads, d, d), applied to q and k of every token (prefix tokens too) before
          the rotation (:func:`mix_qkv`): STRING's learned orthogonal P. It folds into the q and k projections
          for inference (:meth:`PosScheme.fold`).
    block_mask: FlexAttention's BlockMask of the keys each query may see, where ``bias`` masks (-inf) and attention
          runs on FlexAttention (``vitpos.attention.uses_flex``): whole key blocks outside it are skipped.
    """

    rope: Tensor | None = None
    bias: Tensor | None = None
    logit_scale: float | Tensor = 1.0
    rotation: Tensor | None = None
    mix: Tensor | None = None
    block_mask: object | None = None


NO_POS = AttnPos()
# every scheme's constructor takes these
COMMON_ARGS = ("dim", "num_heads", "depth", "grid", "num_prefix_tokens", "pos_aug")

# -- coordinates ---------------------------------------------------------------------------------------
FRAMES = ("grid", "separate", "min", "max")
FUZZY = 0.5  # ViTAR's offsets: uniform in [-0.5, 0.5] patches, the default of a bare ``fuzzy``


@dataclass(frozen=True)
class PosAug:
    """Position augmentation of the patch coordinates, in training mode only; each part is off when None.

    DINOv3's three act on the normalised coordinates (the image spans [-1, 1] per axis), in this order:

    * ``shift``: c += u, one uniform u in [-shift, shift] per axis;
    * ``jitter``: c *= e^u, one log-uniform scale in [1/jitter, jitter] per axis;
    * ``rescale``: c *= e^u, one log-uniform scale in [1/rescale, rescale] shared by both axes;

    and ViTAR's fuzzy positional encoding after them:

    * ``fuzzy``: every token's coordinate moves by its own uniform offset in [-fuzzy, fuzzy] patches per axis.

    A scheme on integer grid positions sees the same transformation, mapped to patch units about the grid's centre.
    Text form (``--pos-aug``): ``shift=0.1,jitter=1.2,rescale=2,fuzzy`` (a bare ``fuzzy`` is ``fuzzy=0.5``), ``off``.
    """

    shift: float | None = None
    jitter: float | None = None
    rescale: float | None = None
    fuzzy: float | None = None

    def __post_init__(self):
        for f, least in zip(fields(self), (0.0, 1.0, 1.0, 0.0), strict=True):
            v = getattr(self, f.name)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= least):
                raise ValueError(f"position augmentation {f.name} must be a finite number >= {least:g}, got {v!r}")

    @property
    def on(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    @classmethod
    def parse(cls, text: str) -> PosAug:
        """``shift=S,jitter=J,rescale=R,fuzzy[=F]`` (any subset, any order) or ``off``/``none``; else ValueError."""
        text = text.strip()
        if text.lower() in ("", "off", "none"):
            return cls()
        names = [f.name for f in fields(cls)]
        values: dict[str, float] = {}
        for item in text.split(","):
            key, sep, value = (part.strip() for part in item.partition("="))
            if key not in names:
                raise ValueError(f"unknown position augmentation '{key}'; valid: {', '.join(names)} (or off)")
            if key in values:
                raise ValueError(f"position augmentation '{key}' is given twice")
            if not sep and key == "fuzzy":
                values[key] = FUZZY
                continue
            try:
                values[key] = float(value)
            except ValueError:
                got = item.strip()
                raise ValueError(f"position augmentation {key} needs a number ({key}=2), got '{got}'") from None
        return cls(**values)

    def __str__(self) -> str:
        on = [f"{f.name}={getattr(self, f.name):g}" for f in fields(self) if getattr(self, f.name) is not None]
        return ",".join(on) or "off"


AUG_OFF = PosAug()


def parse_pos_aug(value: PosAug | str | None) -> PosAug | None:
    """A PosAug from its text form; None (the scheme's own default) for None or "default"."""
    if value is None or isinstance(value, PosAug):
        return value
    if value.strip().lower() == "default":
        return None
    return PosAug.parse(value)


def axis_lengths(grid: Grid, frame: str) -> tuple[int, int]:
    """The lengths (D_y, D_x) that map the patch centres of ``grid`` onto [-1, 1] in a normalised ``frame``."""
    h, w = grid
    if frame == "separate":
        return h, w
    d = min(h, w) if frame == "min" else max(h, w)
    return d, d


def patch_coords(grid: Grid, frame: str = "grid", ref: Grid | None = None, device=None,
                 dtype=torch.float32) -> Tensor:  # fmt: skip
    """(N, 2) (y, x) coordinates of the tokens of ``grid`` in row-major order.

    ``grid``: integer row and column indices. A normalised frame: patch centres divided by the lengths of
    :func:`axis_lengths` for ``ref`` (default: ``grid`` itself) and mapped to [-1, 1], c = 2 (i + 0.5) / D - 1
    (DINOv3): with ``ref`` the training grid a larger grid keeps the trained spacing and reaches beyond 1.
    """
    if frame == "grid":
        ys, xs = torch.arange(grid[0], device=device, dtype=dtype), torch.arange(grid[1], device=device, dtype=dtype)
    else:
        d_y, d_x = axis_lengths(ref or grid, frame)
        ys = 2.0 * (torch.arange(grid[0], device=device, dtype=dtype) + 0.5) / d_y - 1.0
        xs = 2.0 * (torch.arange(grid[1], device=device, dtype=dtype) + 0.5) / d_x - 1.0
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def _log_uniform(n: int, bound: float, device) -> Tensor:
    return torch.empty(n, device=device).uniform_(-math.log(bound), math.log(bound)).exp()


def augment_coords(c: Tensor, aug: PosAug, grid: Grid, frame: str, ref: Grid | None = None) -> Tensor:
    """Coordinates ``c`` (N, 2) of ``grid`` in ``frame`` with one random draw of ``aug`` applied (see PosAug)."""
    device = c.device
    if frame == "grid":  # to the normalised frame about the grid's centre, and back after DINOv3's three
        centre = c.new_tensor([(grid[0] - 1) / 2, (grid[1] - 1) / 2])
        half = c.new_tensor([grid[0] / 2, grid[1] / 2])
        c = (c - centre) / half
    if aug.shift is not None:
        c = c + torch.empty(2, device=device).uniform_(-aug.shift, aug.shift)
    if aug.jitter is not None:
        c = c * _log_uniform(2, aug.jitter, device)
    if aug.rescale is not None:
        c = c * _log_uniform(1, aug.rescale, device)
    if frame == "grid":
        c = c * half + centre
    if aug.fuzzy is not None:
        step = 1.0 if frame == "grid" else c.new_tensor([2.0 / n for n in axis_lengths(ref or grid, frame)])
        c = c + (torch.rand(c.shape, device=device, dtype=c.dtype) * 2 - 1) * (aug.fuzzy * step)
    return c


class PosScheme(nn.Module):
    """Base class: no position at either hook. Subclasses override what they use.

    Args:
        dim: token width. num_heads, depth: of the ViT it serves.
        grid: the training token grid (rows, cols). num_prefix_tokens: class token(s)
        placed before the patch tokens, which never receive position.
    """

    methods: tuple[str, ...] = ("none",)  # ways to serve a new grid; the first is the default
    frame: str | None = None  # the coordinates the scheme reads (FRAMES); None: it reads none
    default_aug: PosAug = AUG_OFF  # the augmentation it trains with when none is given

    def __init__(
        self, *, dim: int, num_heads: int, depth: int, grid: Grid, num_prefix_tokens: int = 0,
        pos_aug: PosAug | str | None = None,
    ):  # fmt: skip
        super().__init__()
        self.dim, self.num_heads, self.depth = dim, num_heads, depth
        self.head_dim = dim // num_heads
        self.train_grid: Grid = (int(grid[0]), int(grid[1]))
        self.num_prefix_tokens = num_prefix_tokens
        aug = parse_pos_aug(pos_aug)
        self.pos_aug: PosAug = self.default_aug if aug is None else aug
        if self.pos_aug.on and type(self).frame is None:
            raise ValueError(f"{type(self).__name__} reads no patch coordinates: position augmentation has nothing "
                             "to act on")  # fmt: skip
        self._method = self.methods[0]
        self._cache: dict[tuple, object] = {}

    @classmethod
    def options(cls) -> list[str]:
        """The keyword options this scheme takes beyond the common ones (its own and its parents')."""
        names: list[str] = []
        for klass in cls.__mro__:
            if klass is PosScheme:
                break
            init = klass.__dict__.get("__init__")
            params = inspect.signature(init).parameters.values() if init is not None else ()
            names += [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in names]
        return names

    @classmethod
    def check_options(cls, name: str, kwargs: dict) -> None:
        """ValueError naming the options in ``kwargs`` that scheme ``name`` does not take, and those it does."""
        unknown = sorted(set(kwargs) - set(COMMON_ARGS) - set(cls.options()))
        if unknown:
            takes = ", ".join(cls.options()) or "none"
            raise ValueError(f"{name} has no option {', '.join(unknown)}; its options: {takes}")

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

    # -- coordinates ---------------------------------------------------------------------
    @property
    def augmenting(self) -> bool:
        """Whether a forward now draws random coordinates (training mode with augmentation on)."""
        return self.training and self.pos_aug.on

    def coords(self, grid: Grid, device=None, *, ref: Grid | None = None, dtype=torch.float32) -> Tensor:
        """(N, 2) (y, x) coordinates of the tokens of ``grid`` in this scheme's frame (see :func:`patch_coords`;
        ``ref`` normalises a normalised frame), with a fresh draw of the position augmentation in training."""
        frame = self.frame or "grid"
        c = patch_coords(grid, frame, ref, device, dtype)
        return augment_coords(c, self.pos_aug, grid, frame, ref) if self.augmenting else c

    # -- hooks ---------------------------------------------------------------------------
    def tokens(self, x: Tensor, grid: Grid) -> Tensor:
        """x: (B, N, D) patch tokens in row-major grid order -> (B, N, D)."""
        return x

    def attn_pos(self, grid: Grid, device: torch.device | None = None) -> list[AttnPos]:
        """What each block's attention takes from position on this grid (q/k rotation, logit bias, logit scale):
        one AttnPos per block, its tensors on ``device``."""
        return [NO_POS] * self.depth

    def after_block(self, x: Tensor, grid: Grid, index: int) -> Tensor:
        """Hook after block ``index`` (for conditional encodings such as PEG); default: nothing."""
        return x

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of parameters that must not be decayed."""
        return {name for name, _ in self.named_parameters()}

    def fold(self) -> tuple[PosScheme, Tensor | None]:
        """For inference: the scheme that serves the model once the returned per-block maps, (depth, heads, d, d)
        applied to q and k (AttnPos.mix), are folded into the q and k projections; (self, None): nothing to fold."""
        return self, None

    @property
    def carries_grid_state(self) -> bool:
        """Whether some of its state is sized by the grid, so that ``state_at_grid`` carries it to a new one."""
        return type(self).state_at_grid is not PosScheme.state_at_grid

    @property
    def serves_by_method(self) -> bool:
        """Whether a model fine-tuned at a new grid keeps this scheme at its training grid, serving the new one by
        the current method: true where nothing in the scheme is sized by the grid and it has more than one method.
        Rebuilt for the new grid, such a scheme would take that grid as trained and serve it as its own (integer
        positions: ``extrapolate``), whatever its method; a scheme with a grid-sized state carries that state to the
        new grid by its method instead."""
        return len(self.methods) > 1 and not self.carries_grid_state

    def state_at_grid(self, grid: Grid) -> dict[str, Tensor]:
        """State for this scheme rebuilt with ``grid`` as its training grid (fine-tuning at a new size),
        carried there by the current method. Default: the state unchanged (nothing in it is sized by the grid)."""
        return {k: v.detach().clone() for k, v in self.state_dict().items()}

    # -- caching -------------------------------------------------------------------------
    def cached(self, key: tuple, build, *params: Tensor):
        """Return build() cached under key and the method, valid while ``params`` hold the values it saw.

        Differentiable results are only cached when no gradient is recorded, so a training step always
        gets a fresh graph while evaluation never recomputes. An entry keeps a copy of the (small)
        position parameters it was built from and is used only while they are equal to it: a change of
        any kind (an optimizer step, a fused optimizer, an edit through ``.data``, a loaded state dict)
        rebuilds it. Under torch.compile the cache is bypassed: the graph builds what it needs itself
        (a few small ops, fused by the compiler).
        """
        if torch.compiler.is_compiling() or self.augmenting:
            # comparing tensors is data-dependent (a graph break each), and the cache dict's contents would
            # be guarded on (a recompile per fill); an augmented forward draws fresh coordinates.
            return build()
        grad_needed = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        if grad_needed:
            return build()
        full_key = (key, self._method)
        entry = self._cache.get(full_key)
        if entry is not None and all(torch.equal(seen, p) for seen, p in zip(entry[0], params, strict=True)):
            return entry[1]
        if len(self._cache) > 32:  # bound memory when sweeping many grids
            self._cache.clear()
        value = build()
        self._cache[full_key] = (tuple(p.detach().clone() for p in params), value)
        return value

    def _apply(self, fn, recurse=True):
        self._cache.clear()  # .to(device/dtype) invalidates cached tensors
        return super()._apply(fn, recurse)


def grid_coords(grid: Grid, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
    """Row and column index of each token in row-major order: two (N,) tensors (:func:`patch_coords`, unaugmented)."""
    return patch_coords(grid, "grid", device=device, dtype=dtype).unbind(-1)


def coord_offsets(c: Tensor) -> tuple[Tensor, Tensor]:
    """(N, N) row and column offsets, key minus query, between coordinates ``c`` (N, 2)."""
    d = c[None, :, :] - c[:, None, :]  # (query, key, 2)
    return d[..., 0], d[..., 1]


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
    # The rotation runs in fp32 and is rounded once: cos/sin rounded to bf16 first would be off by up to
    # 2^-9 each, an error that grows with |x| (tests/test_pos_mixed_cpb_peg_compose.py bounds it).
    cos, sin = rot.float().unbind(-1)
    x1, x2 = pairs.float().unbind(-1)
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).to(x.dtype)


def prefix_bias_param(depth: int, num_heads: int, num_prefix_tokens: int, init: float) -> nn.Parameter | None:
    """Learned logit bias between prefix (class) tokens and the rest, per block and head, as BEiT does:
    (depth, heads, 3) for (prefix query -> patch key, patch query -> prefix key, prefix -> prefix);
    None without prefix tokens. ``init`` should be near the scheme's own patch bias at initialisation,
    so that the class token starts as an ordinary key rather than a hidden one."""
    if not num_prefix_tokens:
        return None
    return nn.Parameter(torch.full((depth, num_heads, 3), float(init)))


def add_prefix_bias(bias: Tensor, prefix: Tensor | None, num_prefix_tokens: int) -> Tensor:
    """(L, heads, N, N) patch bias -> (L, heads, P+N, P+N), prefix rows and columns from ``prefix`` (L, heads, 3)."""
    p = num_prefix_tokens
    if not p:
        return bias
    n = bias.shape[-1]
    to_patch, from_patch, to_prefix = (t[..., None, None] for t in prefix.to(bias.dtype).unbind(-1))
    top = torch.cat([to_prefix.expand(-1, -1, p, p), to_patch.expand(-1, -1, p, n)], dim=-1)  # prefix queries
    rest = torch.cat([from_patch.expand(-1, -1, n, p), bias], dim=-1)  # patch queries
    return torch.cat([top, rest], dim=-2)


def rotate_blocks(x: Tensor, rot: Tensor) -> Tensor:
    """Turn q or k (B, heads, N, d) by block-diagonal matrices ``rot`` (N, d/b, b, b) or (heads, N, d/b, b, b).

    One einsum contracts each block of b channels with its token's matrix; ``rot`` broadcasts over the
    batch inside the contraction (it is never expanded to the batch size).
    """
    b = rot.shape[-1]
    blocks = x.unflatten(-1, (-1, b))  # (B, heads, N, d/b, b)
    rot = rot.to(x.dtype)
    if rot.dim() == 4:
        out = torch.einsum("nkij,bhnkj->bhnki", rot, blocks)
    else:
        out = torch.einsum("hnkij,bhnkj->bhnki", rot, blocks)
    return out.flatten(-2)


def mix_qkv(qkv: Tensor, pos: AttnPos, num_heads: int) -> Tensor:
    """(B, N, 3D) packed q, k, v (heads inside, ``(three h d)``) -> q and k of every head multiplied by the block's
    ``mix`` (heads, d, d), v as it is; unchanged without a mix. The result stays packed, so that q and k keep the
    layout they have without a mix (how the rotation rounds depends on it: a zero STRING is rope2d bit for bit)."""
    if pos.mix is None:
        return qkv
    parts = rearrange(qkv, "b n (three h d) -> b n three h d", three=3, h=num_heads)
    qk = torch.einsum("hij,bnthj->bnthi", pos.mix.to(qkv.dtype), parts[:, :, :2])  # P q per token and head
    return torch.cat([qk, parts[:, :, 2:]], dim=2).flatten(2)


def rotate_qk(q: Tensor, k: Tensor, pos: AttnPos) -> tuple[Tensor, Tensor]:
    """Apply the block's q/k rotation, if any (``rope`` pairs or a general block ``rotation``); a ``mix`` is applied
    before, to the packed projection (:func:`mix_qkv`)."""
    if pos.rope is not None:
        return rotate(q, pos.rope), rotate(k, pos.rope)
    if pos.rotation is not None:
        return rotate_blocks(q, pos.rotation), rotate_blocks(k, pos.rotation)
    return q, k
