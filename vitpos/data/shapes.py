"""`shapes`: the embedded, procedural data set; rendered natively at any resolution.

Each image holds two objects on a noisy background of a random dark colour (channels in
[0, 0.25]): a circle and a *reference* object that is either a square or a diamond (an L1
ball). Object colours are random and bright (channels in [0.5, 1], at least 0.35 away from
the background in some channel): with colours drawn from the whole cube a ViT sat at chance
for hundreds of steps. The 8 classes are

    label = 4 * shape + relation
    shape:    0 square, 1 diamond                                  (what the reference is)
    relation: 0 left, 1 right, 2 above, 3 below                    (where the circle is)

Classes are exactly balanced (label = index % 8).

Layout. The image is divided into ``CELLS`` x ``CELLS`` cells (8 x 8: at the default 32 px with
patch 4 a cell is one patch). Each object sits in a cell, and both objects sit at the *same*
random offset (phase) inside their cells, so the circle-to-reference offset is a whole number
of cells along each axis. A scene draws the circle radius (0.07-0.10 of the image side) and the
reference half-size (0.07-0.10), then one layout uniformly among those where

* each object lies inside the image (at least ``MARGIN`` from every border) at any phase,
* along the relation's axis the objects' extents are at least ``MIN_GAP`` apart (1.25 cells:
  no 4 px patch at 32 px holds both objects, even with the antialiased edges),
* that axis dominates: |cells along it| >= ``DOMINANCE`` x |cells along the other|,

and the phase uniformly in the cell. Labels need position: a position-aware model reaches ~100 %.

Bag-of-patches ceiling. A model that sees the patches as an unordered set (no position, e.g.
`none` with the patch stem) can tell square from diamond but not where the circle is: no patch
holds both objects, no object touches the border, the pixel noise is i.i.d., and the multiset of
patches carries no trace of the relation. The scene distribution is symmetric under mirroring and
quarter turns of the canvas, which map the relations onto each other and leave every object's
shape and the uniform phase distribution unchanged; and because the two objects share their
phase, the patch grid cuts them alike in every class. So the best a bag of patches can do is
``BAG_OF_PATCHES_CEILING`` = 0.25 (chance 0.125), exactly, for every token grid that is a multiple
of 8 x 8 (patch 4 at 32, 64, 96 ... px). At other grids (48 px: 12 x 12) a cell is not a whole number
of patches and a weak cue returns; that only matters when a position-blind model is *trained* there.

Rendering. A scene lives in normalised coordinates ([0, 1]^2, x right, y down). It is
rasterised with antialiasing at the requested size (coverage = clamp(0.5 - signed
distance in pixels, 0, 1)), vectorised over the batch. Every random number is a hash of
(seed, index, slot), so index i is the same scene at every resolution and for every n;
only the rasterisation and the pixel noise (a hash of the pixel position at that
resolution) differ. A non-square canvas H x W shows the same scene stretched, as a
"full" resize of a photo would; labels are defined in the scene's coordinates.

Multi-resolution training (``--train-resolutions``): each batch is rendered natively at its
resolution (``train_dataset_at``), not resized.

Evaluation: ``eval_dataset(R)`` renders natively at R (or H x W); the crop protocol
(``eval_resize`` / ``crop_ratio``) does not apply to ``shapes``. That is the *zoom* regime of
resolution transfer (objects grow with the image). With a window (the *canvas* regime,
vitpos.regime) the same scene is rendered at the training size in pixels inside a larger canvas
of its own background and noise: only the token grid grows.

Augmentation: none by default. ``hflip`` is supported and swaps the left/right labels of
flipped images. ``random_resized_crop`` and ``randaugment`` are refused (ConfigError):
they can cut an object out or rotate the relation into another class.
``random_erasing`` is applied as configured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

from ..config import DataConfig
from ..errors import ConfigError
from ..regime import Window
from ..resolution import to_hw
from .base import VitposDataModule

BAG_OF_PATCHES_CEILING = 0.25
NUM_CLASSES = 8
CELLS = 8  # layout cells per axis: one patch each at 32 px / patch 4
MIN_GAP = 1.25 / CELLS  # between the objects' extents along the relation's axis, in units of the image side
MARGIN = 0.02  # between an object and the border
SIZE_RANGE = (0.07, 0.10)  # circle radius and reference half-size, in units of the image side
DOMINANCE = 1.5  # |cells along the relation's axis| >= DOMINANCE * |cells along the other|
RELATIONS = ("left", "right", "above", "below")
SHAPES = ("square", "diamond")
NOISE = 0.1  # pixel noise: uniform in [-NOISE, NOISE]
_HFLIP_LABEL = torch.tensor([1, 0, 2, 3, 5, 4, 6, 7])  # left <-> right
_CACHE_BYTES = 512 * 2**20  # render a split up front when its uint8 tensor fits this, else per batch

_M32 = 0xFFFFFFFF


def _hash(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 integer hash on int64 tensors holding 32-bit values (wrap-around is harmless:
    only the low 32 bits are kept after each multiply)."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def _uniform(keys: torch.Tensor, slot: int) -> torch.Tensor:
    """A uniform [0, 1) float per key, independent for each slot."""
    h = _hash(keys ^ _hash(torch.tensor(slot * 0x9E3779B1 + 12345)))
    return (h >> 8).to(torch.float32) / float(1 << 24)


@dataclass
class Scenes:
    """Scene parameters for a batch, in normalised coordinates; all tensors have length n."""

    labels: torch.Tensor  # int64
    circle_xy: torch.Tensor  # (n, 2) centre
    radius: torch.Tensor
    ref_xy: torch.Tensor  # (n, 2) centre
    half: torch.Tensor  # half-size (square) or half-diagonal (diamond)
    bg: torch.Tensor  # (n, 3) colours in [0, 1]
    circle_rgb: torch.Tensor
    ref_rgb: torch.Tensor
    keys: torch.Tensor  # int64 per-scene hash, seeds the pixel noise

    @property
    def diamond(self) -> torch.Tensor:
        return self.labels // 4 == 1


def _colour_apart(keys: torch.Tensor, bg: torch.Tensor, slot: int, tries: int = 8) -> torch.Tensor:
    """A random bright colour per scene with max-channel distance >= 0.35 from `bg` (first of `tries`
    candidates that qualifies; the farthest one when none does, probability ~1e-4)."""
    cand = 0.5 + 0.5 * torch.stack(
        [torch.stack([_uniform(keys, slot + 3 * t + c) for c in range(3)], -1) for t in range(tries)], 1
    )  # (n, tries, 3), bright

    dist = (cand - bg[:, None]).abs().amax(-1)  # (n, tries)
    ok = dist >= 0.35
    pick = torch.where(ok.any(1), ok.float().argmax(1), dist.argmax(1))
    return cand[torch.arange(len(keys)), pick]


def _layouts() -> tuple[torch.Tensor, ...]:
    """Every (circle col, circle row, reference col, reference row) cell tuple: four (CELLS^4,) tensors."""
    k = torch.arange(CELLS)
    return tuple(t.flatten() for t in torch.meshgrid(k, k, k, k, indexing="ij"))


def _choose_layout(rel: torch.Tensor, r: torch.Tensor, s: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """For each scene the u-quantile of its valid layouts (see the module docstring): circle and
    reference cells (cx, cy, rx, ry), each (n,) int64."""
    cx, cy, rx, ry = _layouts()

    def fits(k: torch.Tensor, size: torch.Tensor) -> torch.Tensor:  # (n, L): inside at any phase
        return (k / CELLS >= size[:, None] + MARGIN) & ((k + 1) / CELLS <= 1 - size[:, None] - MARGIN)

    dx, dy = cx - rx, cy - ry  # circle minus reference, in cells
    horizontal = (rel < 2)[:, None]
    main = torch.where(horizontal, dx, dy)  # (n, L) signed, along the relation's axis
    other = torch.where(horizontal, dy, dx).abs()
    sign = torch.where(rel % 2 == 0, -1, 1)[:, None]  # left / above: circle at the smaller coordinate
    gap_ok = (main * sign) / CELLS - r[:, None] - s[:, None] >= MIN_GAP
    valid = fits(cx, r) & fits(cy, r) & fits(rx, s) & fits(ry, s) & gap_ok & (main.abs() >= DOMINANCE * other)
    count = valid.sum(1)
    if (count == 0).any():  # cannot happen with the constants above (tested at the extreme sizes)
        raise RuntimeError("shapes: no valid layout for some scene; check CELLS, SIZE_RANGE, MIN_GAP")
    pick = (u * count).long().clamp_max(count - 1)  # the pick-th valid layout, 0-based
    j = (valid.cumsum(1) <= pick[:, None]).sum(1)
    return cx[j], cy[j], rx[j], ry[j]


def sample_scenes(indices: torch.Tensor | range, seed: int) -> Scenes:
    """The scenes with these indices of the stream `seed` (each a pure function of (seed, index))."""
    idx = torch.as_tensor(list(indices) if isinstance(indices, range) else indices, dtype=torch.int64)
    keys = _hash(_hash(torch.tensor(seed & _M32)) ^ _hash(torch.tensor((seed >> 32) & _M32) + 1) ^ idx)
    keys = _hash(keys + idx)  # indices >= 2**32 are not a use case; this just mixes once more
    labels = idx % NUM_CLASSES
    u = [_uniform(keys, s) for s in range(6)]
    lo, hi = SIZE_RANGE
    r = lo + (hi - lo) * u[0]
    s = lo + (hi - lo) * u[1]
    chunk = 4096  # bounds the (n, CELLS^4) layout masks to ~100 MB
    cells = [
        _choose_layout(labels[i : i + chunk] % 4, r[i : i + chunk], s[i : i + chunk], u[2][i : i + chunk])
        for i in range(0, len(idx), chunk)
    ]
    cx, cy, rx, ry = (torch.cat(c) for c in zip(*cells)) if cells else (torch.zeros(0),) * 4
    phase = torch.stack([u[3], u[4]], -1)  # shared by both objects: the grid cuts them alike
    bg = 0.25 * torch.stack([_uniform(keys, 10 + c) for c in range(3)], -1)  # dark
    return Scenes(
        labels=labels,
        circle_xy=(torch.stack([cx, cy], -1) + phase) / CELLS,
        radius=r,
        ref_xy=(torch.stack([rx, ry], -1) + phase) / CELLS,
        half=s,
        bg=bg,
        circle_rgb=_colour_apart(keys, bg, 100),
        ref_rgb=_colour_apart(keys, bg, 200),
        keys=keys,
    )


def coverage(
    scenes: Scenes, height: int, width: int, window: Window | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Antialiased coverage in [0, 1] of the circle and the reference: two (n, H, W) tensors.

    The scene's unit square fills the image, or ``window`` of it (the canvas regime: the scene at the window's
    size in pixels, background around it). Signed distances are in pixels; on a non-square scene the shapes are
    stretched and the distance is the first-order estimate f / |grad f| (exact on a square one, except outside
    the square's corners)."""
    u = (torch.arange(width, dtype=torch.float32) + 0.5) / width
    v = (torch.arange(height, dtype=torch.float32) + 0.5) / height
    sx, sy = (width, height) if window is None else (window.width, window.height)  # the scene's size in pixels

    def to_image(xy: torch.Tensor) -> torch.Tensor:  # scene coordinates -> the image's, both in [0, 1]
        if window is None:
            return xy
        return torch.stack([(window.left + xy[:, 0] * sx) / width, (window.top + xy[:, 1] * sy) / height], -1)

    def offsets(xy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xy = to_image(xy)
        dx = (u[None, None, :] - xy[:, 0, None, None]) * width  # (n, 1, W) pixels
        dy = (v[None, :, None] - xy[:, 1, None, None]) * height  # (n, H, 1)
        return dx, dy

    # circle (an ellipse on a non-square scene): g = |(dx/a, dy/b)|, sdf = (g - 1) / |grad g|
    dx, dy = offsets(scenes.circle_xy)
    a = (scenes.radius * sx)[:, None, None]
    b = (scenes.radius * sy)[:, None, None]
    g = torch.sqrt((dx / a) ** 2 + (dy / b) ** 2)
    grad = torch.sqrt((dx / a**2) ** 2 + (dy / b**2) ** 2) / g.clamp_min(1e-6)
    sdf_c = (g - 1) / grad.clamp_min(1e-6)

    dx, dy = offsets(scenes.ref_xy)
    a = (scenes.half * sx)[:, None, None]
    b = (scenes.half * sy)[:, None, None]
    square = torch.maximum(dx.abs() - a, dy.abs() - b)
    diamond = (dx.abs() / a + dy.abs() / b - 1) / torch.sqrt(1 / a**2 + 1 / b**2)
    sdf_r = torch.where(scenes.diamond[:, None, None], diamond, square)
    return (0.5 - sdf_c).clamp(0, 1), (0.5 - sdf_r).clamp(0, 1)


def rasterise(
    scenes: Scenes, height: int, width: int, noise: float = NOISE, window: Window | None = None
) -> torch.Tensor:
    """Float images (n, 3, H, W) in [0, 1]: the scene over the whole image, or over ``window`` of it with its
    background (colour and pixel noise) filling the rest."""
    cov_c, cov_r = coverage(scenes, height, width, window)
    img = scenes.bg[:, :, None, None].expand(-1, -1, height, width)
    img = img + (scenes.circle_rgb[:, :, None, None] - img) * cov_c[:, None]
    img = img + (scenes.ref_rgb[:, :, None, None] - img) * cov_r[:, None]
    if noise > 0:
        # i.i.d. per pixel (shared by the channels): a hash of (scene, resolution, pixel)
        salt = _hash(torch.tensor(height * 100003 + width))
        pix = _hash(torch.arange(height * width, dtype=torch.int64) ^ salt)
        h = _hash(scenes.keys[:, None] ^ pix[None, :]).view(-1, 1, height, width)
        img = img + noise * (2 * ((h >> 8).to(torch.float32) / float(1 << 24)) - 1)
    return img.clamp(0, 1)


def render_shapes(
    n: int, height: int, width: int, seed: int, *, start: int = 0, noise: float = NOISE, window: Window | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scenes start..start+n-1 of stream `seed`: float images (n, 3, H, W) in [0, 1], int64 labels."""
    scenes = sample_scenes(range(start, start + n), seed)
    chunk = max(1, (1 << 21) // (height * width))  # bounds the float intermediates to ~100 MB
    imgs = [rasterise(_take(scenes, slice(i, i + chunk)), height, width, noise, window) for i in range(0, n, chunk)]
    return (torch.cat(imgs) if imgs else torch.zeros(0, 3, height, width)), scenes.labels


def _take(scenes: Scenes, sel) -> Scenes:
    return Scenes(**{k: v[sel] for k, v in vars(scenes).items()})


class ShapesDataset(Dataset):
    """n scenes of stream `seed` at H x W, as normalised float tensors and int labels.

    Renders (and keeps as uint8) the whole split up front when it fits ``_CACHE_BYTES``;
    larger splits render per batch (``__getitems__``, which DataLoader uses) or per item."""

    def __init__(
        self,
        n: int,
        seed: int,
        size: tuple[int, int],
        mean: tuple[float, ...],
        std: tuple[float, ...],
        hflip: bool = False,
        random_erasing: float = 0.0,
        window: Window | None = None,
    ) -> None:
        self.n, self.seed, (self.height, self.width), self.window = n, seed, size, window
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)
        self.hflip = hflip
        self.erase = v2.RandomErasing(p=random_erasing, value=0) if random_erasing > 0 else None
        self.images: torch.Tensor | None = None
        self.labels = torch.arange(n) % NUM_CLASSES
        if n * 3 * self.height * self.width <= _CACHE_BYTES:
            self.images = _to_uint8(render_shapes(n, self.height, self.width, seed, window=window)[0])

    def __len__(self) -> int:
        return self.n

    def _uint8(self, idx: list[int]) -> torch.Tensor:
        if self.images is not None:
            return self.images[idx]
        scenes = sample_scenes(torch.tensor(idx), self.seed)
        return _to_uint8(rasterise(scenes, self.height, self.width, window=self.window))

    def __getitems__(self, idx: list[int]) -> list[tuple[torch.Tensor, int]]:
        if any(i < 0 or i >= self.n for i in idx):
            raise IndexError(f"index out of range for {self.n} scenes")
        x = (self._uint8(list(idx)).float() / 255 - self.mean) / self.std
        y = self.labels[idx]
        if self.hflip:
            flip = torch.rand(len(idx)) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            y = torch.where(flip, _HFLIP_LABEL[y], y)
        out = []
        for xi, yi in zip(x, y.tolist(), strict=True):
            out.append((self.erase(xi) if self.erase is not None else xi, yi))
        return out

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i < 0:
            i += self.n
        return self.__getitems__([i])[0]


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    return (x * 255).round().to(torch.uint8)


class ShapesDataModule(VitposDataModule):
    """The embedded default data set; see the module docstring."""

    name = "shapes"
    num_classes = NUM_CLASSES
    in_chans = 3
    mean = (0.5, 0.5, 0.5)
    std = (0.5, 0.5, 0.5)
    native_size = 32

    _SPLIT_OFFSET = {"train": 0, "val": 1, "test": 2}

    def __init__(self, cfg: DataConfig, img_size: int, seed: int = 0) -> None:
        super().__init__(cfg, img_size, seed)
        if cfg.random_resized_crop or cfg.randaugment:
            raise ConfigError(
                "shapes: random_resized_crop and randaugment can cut out an object or rotate the "
                "relation that is the label; switch them off (hflip and random_erasing are supported)"
            )
        for split in self._SPLIT_OFFSET:
            if self._split_size(split) < 1:
                raise ConfigError(f"shapes: {split}_size must be >= 1, got {self._split_size(split)}")
        self._cache: dict[tuple, ShapesDataset] = {}

    def _split_size(self, split: str) -> int:
        return getattr(self.cfg, f"{split}_size")

    def split_seed(self, split: str) -> int:
        """Distinct fixed stream per (config seed, split)."""
        return 3 * self.seed + self._SPLIT_OFFSET[split]

    def _dataset(self, split: str, size: tuple[int, int], train: bool, window: Window | None = None) -> ShapesDataset:
        self._check_split(split)
        key = (split, *size, train, window)
        if key not in self._cache:
            self._cache[key] = ShapesDataset(
                self._split_size(split),
                self.split_seed(split),
                size,
                self.mean,
                self.std,
                hflip=train and self.cfg.hflip,
                random_erasing=self.cfg.random_erasing if train else 0.0,
                window=window,
            )
        return self._cache[key]

    def train_dataset(self) -> Dataset:
        return self._dataset("train", (self.img_size, self.img_size), train=True)

    def train_dataset_at(self, hw: tuple[int, int]) -> Dataset:
        """The training split rendered natively at (H, W): multi-resolution training draws the same
        scenes at every resolution (each split rendered once per resolution, then cached)."""
        return self._dataset("train", to_hw(hw), train=True)

    def eval_dataset(
        self, resolution: int | tuple[int, int], split: str = "val", window: Window | None = None
    ) -> Dataset:
        """Split `split` rendered natively at `resolution` (R or (H, W)); no crop protocol. With a ``window`` (the
        canvas regime) each scene is rendered at the window's size in pixels, on its own background."""
        return self._dataset(split, to_hw(resolution), train=False, window=window)
