"""`rope2d`: 2D axial rotary position embedding (RoPE-Axial, Heo et al. 2024).

Per head of width d there are d/4 frequencies f_k = theta^(-4k/d). Of the d/2 rotary
pairs, the first half turn by x * f and the second half by y * f, so the logit between
tokens m and n depends only on their offset (y_m - y_n, x_m - x_n).

Layout (pinned by a test): interleaved pairs, i.e. pair j is (q[2j], q[2j+1]), turned by
angle a[:, j] of the (N, d/2) angles; the blocks receive (cos a, sin a) stacked, (N, d/2, 2).

Methods for a grid other than the training one (s = new size / trained size, per axis):

* ``extrapolate``: integer positions of the new grid, unchanged frequencies;
* ``interpolate``: position interpolation, y -> y / s_y, x -> x / s_x;
* ``ntk``: NTK-aware base scaling per axis, theta -> theta * s^(d'/(d'-2)), d' = d/2 the
  rotary width of one axis (only when s > 1);
* ``yarn``: per-frequency blend between interpolation and extrapolation (YaRN), with a ramp
  derived for grid axes (:func:`yarn_ramp`): pairs that turned through a full circle over the
  trained offsets keep their frequency, pairs that turned through half a circle or less are
  interpolated; plus YaRN's attention temperature, logits x (0.1 ln(s) + 1)^2, with s the larger
  axis factor (``yarn_temperature="axis"``) or the token-count ratio (``"tokens"``).

Coordinates (``coords``, read through the seam, :meth:`PosScheme.coords`, where position augmentation acts in
training): ``grid`` (the default) turns pair k by position x f_k, integer patch indices; ``separate``, ``min``
or ``max`` are DINOv3's normalised patch centres c in [-1, 1] (``vitpos.pos.base.patch_coords``), turned by
2 pi c / T_k with periods T_k = theta^(4k/d), computed in fp32 with autocast off as DINOv3 does. There a new
grid is interpolated by normalising it onto [-1, 1] itself (``interpolate``, or ``normalized``), extrapolated by
normalising it with the training grid's lengths (``extrapolate``: the trained spacing; ``ntk`` and ``yarn``
change the periods on top). ``order`` puts the column pairs first (``xy``, RoPE-ViT's layout) or the row
pairs (``yx``, DINOv3's).

`rope2d-norm` is DINOv3's RoPE as a preset of this scheme: normalised ``separate`` coordinates, row pairs
first, trained with the released augmentation ``rescale=2`` unless ``--pos-aug`` says otherwise; its methods
keep their names, ``extrapolate`` (the default, chosen on validation: docs/protocol.md) and ``normalized``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import FRAMES, AttnPos, Grid, PosAug, PosScheme


def check_base(name: str, value: float) -> None:
    """A frequency base must be a finite number > 1: at 1 every pair turns alike, below 1 the ladder inverts."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 1):
        raise ValueError(f"{name} must be a number > 1, got {value!r}")


def axial_frequencies(head_dim: int, theta: float) -> Tensor:
    """(head_dim/4,) frequencies theta^(-4k/head_dim), in fp64 for exact angles."""
    if head_dim % 4:
        raise ValueError(f"rope2d needs a head dim divisible by 4, got {head_dim}")
    check_base("theta", theta)
    k = torch.arange(head_dim // 4, dtype=torch.float64)
    return theta ** (-4.0 * k / head_dim)


def dinov3_periods(head_dim: int, theta: float) -> Tensor:
    """(head_dim/4,) fp32 periods theta^(4k/head_dim) of the normalised frames (DINOv3's, in its precision)."""
    axial_frequencies(head_dim, theta)  # validates
    return theta ** (4 * torch.arange(head_dim // 4, dtype=torch.float32) / head_dim)


# YaRN's ramp ends for grid axes, in full turns over the trained offsets (see yarn_ramp).
YARN_ALPHA, YARN_BETA = 0.5, 1.0
YARN_TEMPERATURES = ("axis", "tokens")


def yarn_ramp(freqs: Tensor, train_len: int, alpha: float = YARN_ALPHA, beta: float = YARN_BETA) -> Tensor:
    """gamma in [0, 1] per frequency: 1 keeps (extrapolates) it, 0 interpolates it fully.

    Logits depend on offsets, and an axis of L tokens trains offsets -(L-1)..L-1, over which a pair of
    frequency f turns through T = 2 (L-1) f / 2 pi full circles. With T >= 1 the pair has met every
    angle it can take, so longer offsets bring it nothing new: it keeps its frequency (``beta`` = 1).
    With T <= 1/2 (``alpha``) it would meet angles it never saw: it is interpolated; linear between.
    YaRN's language-model ends (alpha 1, beta 32 wavelengths per context) assume thousands of tokens: on
    an 8-token axis with theta = 100 they interpolate every pair.
    """
    turns = (train_len - 1) * freqs / math.pi
    return ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)


def yarn_temperature(grid: Grid, train_grid: Grid, mode: str) -> float | Tensor:
    """YaRN's logit factor (0.1 ln(s) + 1)^2 for s > 1 (else 1); s per ``mode`` (see the module docstring).

    A number for a grid of numbers; under ``torch.export`` the grid is symbolic, and the factor is a 0-d tensor
    computed in the graph, so that one exported program serves every grid (the attention then scales q by it)."""
    s_y, s_x = grid[0] / train_grid[0], grid[1] / train_grid[1]
    if isinstance(s_y, float) and isinstance(s_x, float):
        s = max(s_y, s_x) if mode == "axis" else s_y * s_x
        return (0.1 * math.log(s) + 1.0) ** 2 if s > 1 else 1.0
    t_y, t_x = ratio(s_y), ratio(s_x)
    t = torch.maximum(t_y, t_x) if mode == "axis" else t_y * t_x
    return torch.where(t > 1, (0.1 * t.log() + 1.0) ** 2, torch.ones_like(t))


def ratio(s: float) -> Tensor:
    """A size ratio as an fp64 0-d tensor: where it is symbolic (``torch.export``), a choice on it (s > 1) stays in
    the graph as a select instead of fixing the program to one side of it."""
    return torch.scalar_tensor(s, dtype=torch.float64)


def check_yarn_options(alpha: float, beta: float, temperature: str) -> str:
    """Validate YaRN's options (ValueError in one line); returns the temperature mode."""
    if not alpha < beta:
        raise ValueError(f"yarn_alpha ({alpha}) must be below yarn_beta ({beta})")
    if temperature not in YARN_TEMPERATURES:
        raise ValueError(f"yarn_temperature must be one of {', '.join(YARN_TEMPERATURES)}, got '{temperature}'")
    return temperature


def rope_rotation(angles: Tensor, num_prefix_tokens: int = 0) -> Tensor:
    """Angles (..., N, d/2) -> fp32 (cos, sin) stacked, (..., P + N, d/2, 2); the P prefix rows are (1, 0)."""
    cos, sin = angles.cos().float(), angles.sin().float()  # cos/sin in the angles' precision (fp64 for rope2d)
    if num_prefix_tokens:
        pad = [0, 0, num_prefix_tokens, 0]
        cos = torch.nn.functional.pad(cos, pad, value=1.0)
        sin = torch.nn.functional.pad(sin, pad, value=0.0)
    return torch.stack([cos, sin], dim=-1)


def transfer_frequencies(
    method: str,
    fy: Tensor,
    fx: Tensor,
    grid: Grid,
    train_grid: Grid,
    *,
    exponent: Tensor,
    magnitude: Tensor,
    head_dim: int,
    yarn_alpha: float,
    yarn_beta: float,
    yarn_temperature_mode: str = "axis",
) -> tuple[Tensor, Tensor, float | Tensor]:
    """Frequency components along rows (fy) and columns (fx) for ``grid`` under ``method``, and the logit scale.

    Shared by ``rope2d`` (fixed axial frequencies) and ``rope2d-mixed`` (learned 2D ones); the
    row component scales with the row factor s_y, the column component with s_x.
    exponent: 4k/d of each frequency, its place on the ladder f_k = theta^(-4k/d); NTK's raised base
    theta * s^(d'/(d'-2)) multiplies f_k by s^(-(4k/d) d'/(d'-2)).
    magnitude: |f| of each frequency, which sets its wavelength for YaRN's ramp.
    exponent and magnitude broadcast against fy and fx.
    """
    s_y, s_x = grid[0] / train_grid[0], grid[1] / train_grid[1]
    if method == "interpolate":
        return fy / s_y, fx / s_x, 1.0
    if method == "ntk":
        d_axis = head_dim // 2

        def ntk(f: Tensor, s: float) -> Tensor:
            if d_axis <= 2:  # the one frequency is theta^0 = 1 for any base
                return f
            t = ratio(s).to(f.dtype)
            return torch.where(t > 1, f * t ** (-exponent * (d_axis / (d_axis - 2))), f)  # s <= 1: unchanged

        return ntk(fy, s_y), ntk(fx, s_x), 1.0
    if method == "yarn":

        def yarn(f: Tensor, s: float, train_len: int) -> Tensor:
            g = yarn_ramp(magnitude, train_len, yarn_alpha, yarn_beta)
            t = ratio(s).to(f.dtype)
            return torch.where(t > 1, (1 - g) * f / t + g * f, f)  # s <= 1: unchanged

        scale = yarn_temperature(grid, train_grid, yarn_temperature_mode)
        return yarn(fy, s_y, train_grid[0]), yarn(fx, s_x, train_grid[1]), scale
    return fy, fx, 1.0  # extrapolate


SQUEEZE = ("interpolate", "normalized")  # methods that normalise a new grid onto [-1, 1] itself (normalised frames)


class Rope2dPos(PosScheme):
    """Axial 2D RoPE on q and k in every block; fixed frequencies, no parameters.

    The default method for a new grid, ``interpolate``, is the one the validation split chose over ``extrapolate``,
    ``ntk`` and ``yarn`` (docs/protocol.md); ``extrapolate`` is what timm's RoPE ViTs do."""

    methods = ("interpolate", "extrapolate", "ntk", "yarn")
    frame = "grid"

    def __init__(
        self, *, theta: float = 100.0, coords: str = "grid", order: str = "xy", yarn_alpha: float = YARN_ALPHA,
        yarn_beta: float = YARN_BETA, yarn_temperature: str = "axis", **kw,
    ):  # fmt: skip
        super().__init__(**kw)
        if coords not in FRAMES:
            raise ValueError(f"coords must be one of {', '.join(FRAMES)}, got '{coords}'")
        if order not in ("xy", "yx"):
            raise ValueError(f"order must be xy (column pairs first) or yx (row pairs first), got '{order}'")
        self.theta, self.frame, self.order = theta, coords, order
        self.yarn_alpha, self.yarn_beta = yarn_alpha, yarn_beta
        self.yarn_temperature = check_yarn_options(yarn_alpha, yarn_beta, yarn_temperature)
        axial_frequencies(self.head_dim, theta)  # validate head dim early

    def options_now(self) -> dict:
        """The keyword options this scheme was built with (a scheme of the same rotation is rebuilt from them)."""
        return dict(theta=self.theta, coords=self.frame, order=self.order, yarn_alpha=self.yarn_alpha,
                    yarn_beta=self.yarn_beta, yarn_temperature=self.yarn_temperature)  # fmt: skip

    def axis_frequencies(self, grid: Grid, method: str | None = None) -> tuple[Tensor, Tensor, float | Tensor]:
        """Per-axis frequencies (fy, fx) for ``grid`` under ``method`` (default: the current one), and the logit
        scale."""
        f = axial_frequencies(self.head_dim, self.theta)
        exponent = 4.0 * torch.arange(len(f), dtype=torch.float64) / self.head_dim
        return transfer_frequencies(
            method or self.method, f, f, grid, self.train_grid, exponent=exponent, magnitude=f,
            head_dim=self.head_dim, yarn_alpha=self.yarn_alpha, yarn_beta=self.yarn_beta,
            yarn_temperature_mode=self.yarn_temperature,
        )  # fmt: skip

    def angles(self, grid: Grid, device=None) -> tuple[Tensor, float | Tensor]:
        """(N, d/2) rotation angles, the column pairs then the row pairs (``order`` xy) or the reverse, and the
        logit scale."""
        if self.frame == "grid":  # fp64 angles of integer positions, exact before cos/sin
            fy, fx, scale = self.axis_frequencies(grid)
            ys, xs = self.coords(grid, dtype=torch.float64).unbind(-1)
            ay, ax = ys[:, None] * fy, xs[:, None] * fx
        else:  # DINOv3: fp32 coordinates and periods, autocast off
            squeeze = self.method in SQUEEZE  # the grid normalised onto [-1, 1] by itself: nothing more to scale
            with torch.autocast(torch.device(device or "cpu").type, enabled=False):
                c = self.coords(grid, device, ref=grid if squeeze else self.train_grid)
                fy, fx, scale = self.axis_frequencies(grid, "extrapolate" if squeeze else None)
                f = axial_frequencies(self.head_dim, self.theta)
                periods = dinov3_periods(self.head_dim, self.theta).to(c.device)
                # ntk and yarn scale each frequency: the period by the inverse (exactly 1 for the other methods)
                p_y, p_x = periods / (fy / f).float().to(c.device), periods / (fx / f).float().to(c.device)
                ay, ax = 2 * math.pi * c[:, 0, None] / p_y, 2 * math.pi * c[:, 1, None] / p_x
        return torch.cat([ax, ay] if self.order == "xy" else [ay, ax], dim=1), scale

    def attn_pos(self, grid: Grid, device=None) -> list[AttnPos]:
        def build() -> list[AttnPos]:
            angles, scale = self.angles(grid, device)
            with torch.autocast(torch.device(device or "cpu").type, enabled=False):
                rot = rope_rotation(angles, self.num_prefix_tokens).to(device)
            return [AttnPos(rope=rot, logit_scale=scale)] * self.depth

        return self.cached(("rope", tuple(grid), device), build)


class Rope2dNormPos(Rope2dPos):
    """`rope2d-norm`: DINOv3's RoPE (facebookresearch/dinov3), rope2d on normalised patch centres with the row pairs
    first, trained with the released ``rescale=2`` (see the module docstring); a preset, no code of its own."""

    methods = ("extrapolate", "normalized")
    default_aug = PosAug(rescale=2.0)

    def __init__(self, *, coords: str = "separate", order: str = "yx", **kw):
        if coords == "grid":
            raise ValueError("rope2d-norm's coordinates are normalised: coords must be separate, min or max")
        super().__init__(coords=coords, order=order, **kw)
