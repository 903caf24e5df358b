"""Train and eval transforms (torchvision.transforms.v2, timm's RandAugment).

Inputs are PIL images (timm's RandAugment works on PIL); outputs are normalised float
tensors (C, H, W). Mixup / cutmix act on batches in the LightningModule, not here.

Eval protocol at resolution R (or (H, W)), from ``DataConfig.eval_resize``:
  "crop": resize (bicubic, antialiased) so the image covers R / crop_ratio, keeping its
          aspect (for a square R: short side to floor(R / crop_ratio)), then centre-crop R;
  "full": resize the whole image to R (H x W), aspect not kept.
"""

from __future__ import annotations

import math

import torch
from PIL import Image
from timm.data import rand_augment_transform
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as F

from ..compat.timm import posterize_to_black
from ..config import DataConfig
from ..errors import ConfigError
from ..regime import Window
from ..resolution import to_hw

BICUBIC = InterpolationMode.BICUBIC
EVAL_RESIZE_MODES = ("crop", "full")
INTERPOLATIONS = {"bicubic": BICUBIC, "bilinear": InterpolationMode.BILINEAR, "nearest": InterpolationMode.NEAREST}


def check_data_config(cfg: DataConfig) -> None:
    """The data-side checks that do not depend on the data set."""
    if cfg.eval_resize not in EVAL_RESIZE_MODES:
        raise ConfigError(f"unknown eval_resize '{cfg.eval_resize}'; valid: {', '.join(EVAL_RESIZE_MODES)}")
    if cfg.interpolation not in INTERPOLATIONS:
        raise ConfigError(f"unknown interpolation '{cfg.interpolation}'; valid: {', '.join(INTERPOLATIONS)}")
    if (cfg.mean is None) != (cfg.std is None) or (cfg.mean is not None and len(cfg.mean) != len(cfg.std)):
        raise ConfigError(f"mean and std must be given together, one value per channel each: {cfg.mean}, {cfg.std}")
    if cfg.std is not None and not all(v > 0 for v in cfg.std):
        raise ConfigError(f"std values must be positive, got {cfg.std}")
    if not 0 < cfg.crop_ratio <= 1:
        raise ConfigError(f"crop_ratio must be in (0, 1], got {cfg.crop_ratio}")
    if not 0 < cfg.rrc_scale_min <= 1:
        raise ConfigError(f"rrc_scale_min must be in (0, 1], got {cfg.rrc_scale_min}")
    if not 0 <= cfg.random_erasing <= 1:
        raise ConfigError(f"random_erasing is a probability in [0, 1], got {cfg.random_erasing}")
    if cfg.random_crop_pad < 0:
        raise ConfigError(f"random_crop_pad must be >= 0, got {cfg.random_crop_pad}")
    if cfg.batch_size < 1 or cfg.num_workers < 0:
        raise ConfigError(f"need batch_size >= 1 and num_workers >= 0, got {cfg.batch_size}, {cfg.num_workers}")


class ResizeCover(torch.nn.Module):
    """Resize, keeping the aspect, so that the image covers (H, W) / crop_ratio; then centre-crop (H, W)."""

    def __init__(self, size: tuple[int, int], crop_ratio: float = 1.0, interpolation=BICUBIC) -> None:
        super().__init__()
        self.size, self.crop_ratio, self.interpolation = size, crop_ratio, interpolation

    def forward(self, img):
        h, w = self.size
        ih, iw = F.get_size(img)
        if h == w:  # the usual protocol: short side to floor(R / crop_ratio) (as timm's crop_pct)
            short = math.floor(h / self.crop_ratio)
            if min(ih, iw) != short:  # torchvision's own rule for the long side, so the pixels equal timm's eval
                img = F.resize(img, [short], interpolation=self.interpolation, antialias=True)
            return F.center_crop(img, [h, w])
        scale = max(h / ih, w / iw) / self.crop_ratio
        new = (max(h, round(ih * scale)), max(w, round(iw * scale)))
        if ih == iw:  # keep square images exactly square
            new = (max(new), max(new))
        if new != (ih, iw):
            img = F.resize(img, list(new), interpolation=self.interpolation, antialias=True)
        return F.center_crop(img, [h, w])

    def extra_repr(self) -> str:
        return f"size={self.size}, crop_ratio={self.crop_ratio}"


def _to_tensor(mean, std) -> list:
    return [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))]


def eval_geometry(
    resolution: int | tuple[int, int], mode: str, crop_ratio: float, interpolation: str = "bicubic"
) -> torch.nn.Module:
    hw = to_hw(resolution)
    interp = INTERPOLATIONS[interpolation]
    if mode == "crop":
        return ResizeCover(hw, crop_ratio, interp)
    if mode == "full":
        return v2.Resize(list(hw), interpolation=interp, antialias=True)
    raise ConfigError(f"unknown eval_resize '{mode}'; valid: {', '.join(EVAL_RESIZE_MODES)}")


def eval_transform(
    resolution: int | tuple[int, int],
    cfg: DataConfig,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    window: Window | None = None,
) -> v2.Compose:
    """PIL image -> normalised tensor at `resolution`, following cfg.eval_resize / cfg.crop_ratio.

    With a ``window`` (the canvas regime) the image is brought to the window's size under the same protocol and
    padded with black around it to fill `resolution`."""
    if window is None:
        return v2.Compose([eval_geometry(resolution, cfg.eval_resize, cfg.crop_ratio, cfg.interpolation),
                           *_to_tensor(mean, std)])  # fmt: skip
    h, w = to_hw(resolution)
    geometry = eval_geometry((window.height, window.width), cfg.eval_resize, cfg.crop_ratio, cfg.interpolation)
    pad = [window.left, window.top, w - window.left - window.width, h - window.top - window.height]  # l, t, r, b
    return v2.Compose([geometry, v2.Pad(pad, fill=0), *_to_tensor(mean, std)])


def train_transform(img_size: int, cfg: DataConfig, mean: tuple[float, ...], std: tuple[float, ...]) -> v2.Compose:
    """PIL image -> augmented, normalised tensor (C, img_size, img_size).

    Geometry: RandomResizedCrop(scale=(rrc_scale_min, 1)) when on, else the eval geometry at
    img_size; then RandomCrop with zero padding (random_crop_pad), hflip, RandAugment (timm
    spec string), to tensor + normalise, RandomErasing(p=random_erasing, value 0 = the mean)."""
    ops: list = []
    if cfg.random_resized_crop:
        ops.append(
            v2.RandomResizedCrop(img_size, scale=(cfg.rrc_scale_min, 1.0), interpolation=BICUBIC, antialias=True)
        )
    else:
        ops.append(eval_geometry(img_size, cfg.eval_resize, cfg.crop_ratio, cfg.interpolation))
    if cfg.random_crop_pad > 0:
        ops.append(v2.RandomCrop(img_size, padding=cfg.random_crop_pad))
    if cfg.hflip:
        ops.append(v2.RandomHorizontalFlip())
    if cfg.randaugment:
        fill = tuple(round(255 * m) for m in mean)
        hparams = {
            "translate_const": int(img_size * 0.45),
            "img_mean": fill if len(fill) == 3 else fill[0],
            "interpolation": Image.BICUBIC,
        }
        try:
            ops.append(posterize_to_black(rand_augment_transform(cfg.randaugment, hparams)))
        except (AssertionError, ValueError, KeyError, IndexError) as e:
            raise ConfigError(f"bad randaugment spec '{cfg.randaugment}' (e.g. 'rand-m9-mstd0.5-inc1'): {e}") from None
    ops += _to_tensor(mean, std)
    if cfg.random_erasing > 0:
        ops.append(v2.RandomErasing(p=cfg.random_erasing, value=0))
    return v2.Compose(ops)
