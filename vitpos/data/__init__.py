"""Data sets: one LightningDataModule per family, in a registry keyed by ``DataConfig.name``.

Usage::

    dm = build_datamodule(cfg.data, img_size=32, seed=0)
    dm.num_classes, dm.in_chans, dm.mean, dm.std, dm.native_size
    dm.setup("fit"); dm.train_dataloader(); dm.val_dataloader()
    dm.eval_dataset(64, "test")        # resolution transfer: (C, 64, 64) tensors, int labels
    dm.eval_dataset((32, 64), "test")  # non-square (H, W)
"""

from __future__ import annotations

from ..config import DataConfig
from ..errors import ConfigError
from .base import VitposDataModule
from .digits import DigitsDataModule
from .imagefolder import ImageFolderDataModule
from .mnist import FashionMNISTDataModule, MNISTDataModule
from .shapes import BAG_OF_PATCHES_CEILING, ShapesDataModule, render_shapes
from .shards import ShardsDataModule
from .torchvision_sets import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    Flowers102DataModule,
    STL10DataModule,
    SVHNDataModule,
)

DATASETS: dict[str, type[VitposDataModule]] = {
    m.name: m
    for m in (
        ShapesDataModule,
        DigitsDataModule,
        CIFAR10DataModule,
        CIFAR100DataModule,
        SVHNDataModule,
        STL10DataModule,
        Flowers102DataModule,
        FashionMNISTDataModule,
        MNISTDataModule,
        ImageFolderDataModule,
        ShardsDataModule,
    )
}
DATA_NAMES = tuple(DATASETS)
HF_PREFIX = "hf:"  # --data hf:NAME_OR_PATH: a Hugging Face `datasets` set (vitpos.data.hf)


def is_data_name(name: str) -> bool:
    """A registered name, or hf:NAME_OR_PATH."""
    return name in DATASETS or (name.startswith(HF_PREFIX) and len(name) > len(HF_PREFIX))


def build_datamodule(cfg: DataConfig, img_size: int, seed: int = 0) -> VitposDataModule:
    """The DataModule named by cfg.name; an unknown name is a ConfigError listing the valid ones."""
    if cfg.name.startswith(HF_PREFIX):
        from .hf import HFDataModule  # imports `datasets` only when asked for

        return HFDataModule(cfg, img_size, seed)
    if cfg.name not in DATASETS:
        raise ConfigError(f"unknown data set '{cfg.name}'; valid: {', '.join(DATA_NAMES)}, {HF_PREFIX}NAME_OR_PATH")
    return DATASETS[cfg.name](cfg, img_size, seed)


__all__ = [
    "BAG_OF_PATCHES_CEILING",
    "DATASETS",
    "DATA_NAMES",
    "VitposDataModule",
    "build_datamodule",
    "is_data_name",
    "render_shapes",
]
