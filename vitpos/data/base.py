"""The DataModule base shared by every data family.

A family says what it is (``num_classes``, ``in_chans``, ``mean``, ``std``, ``native_size``)
and how to read one split without transforms (``raw_split(split)`` -> (PIL image, int)); the
base adds the transforms, the loaders and ``eval_dataset(R)`` for resolution transfer.
Families that render natively (``shapes``) override ``train_dataset`` / ``eval_dataset``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from ..config import ConfigError, DataConfig
from .transforms import check_data_config, eval_transform, to_hw, train_transform

SPLITS = ("train", "val", "test")


def cache_dir() -> Path:
    """Where vitpos keeps prepared data: $VITPOS_CACHE, else ~/.cache/vitpos."""
    return Path(os.environ.get("VITPOS_CACHE") or Path.home() / ".cache" / "vitpos")


class TransformDataset(Dataset):
    """(x, y) items of `base` (optionally only `indices`), with `transform` applied to x."""

    def __init__(self, base: Dataset, transform: Any = None, indices: list[int] | None = None) -> None:
        self.base, self.transform, self.indices = base, transform, indices

    def __len__(self) -> int:
        return len(self.indices) if self.indices is not None else len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> tuple[Any, int]:
        x, y = self.base[self.indices[i] if self.indices is not None else i]
        return (self.transform(x) if self.transform is not None else x), int(y)


def holdout_split(n: int, holdout: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Fixed-seed (train, val) index lists carving `holdout` of n items for val."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(perm[holdout:]), sorted(perm[:holdout])


class VitposDataModule(L.LightningDataModule):
    """Base class: loaders from ``cfg`` (batch_size, num_workers) and the eval protocol.

    Under DDP, Lightning adds its DistributedSampler to these loaders itself."""

    name: ClassVar[str] = ""
    num_classes: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    native_size: int

    def __init__(self, cfg: DataConfig, img_size: int, seed: int = 0) -> None:
        super().__init__()
        check_data_config(cfg)
        to_hw(img_size)
        self.cfg, self.img_size, self.seed = cfg, img_size, seed
        self._raw: dict[str, Dataset] = {}
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    # -- what a family provides -------------------------------------------------------------
    def raw_split(self, split: str) -> Dataset:
        """Split `split` without transforms: items (PIL image, int label)."""
        raise NotImplementedError

    # -- datasets -----------------------------------------------------------------------------
    def _check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise ConfigError(f"unknown split '{split}'; valid: {', '.join(SPLITS)}")

    def raw(self, split: str) -> Dataset:
        """`raw_split`, read once per split."""
        self._check_split(split)
        if split not in self._raw:
            self._raw[split] = self.raw_split(split)
        return self._raw[split]

    def train_dataset(self) -> Dataset:
        return TransformDataset(self.raw("train"), train_transform(self.img_size, self.cfg, self.mean, self.std))

    def eval_dataset(self, resolution: int | tuple[int, int], split: str = "val") -> Dataset:
        """Split `split` at `resolution` (R or (H, W)) under the eval protocol of the config:
        items (normalised tensor (C, H, W), int label)."""
        self._check_split(split)
        return TransformDataset(self.raw(split), eval_transform(resolution, self.cfg, self.mean, self.std))

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            self.train_set = self.train_dataset()
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self.eval_dataset(self.img_size, "val")
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self.eval_dataset(self.img_size, "test")

    # -- loaders ------------------------------------------------------------------------------
    def _loader(self, ds: Dataset | None, train: bool) -> DataLoader:
        if ds is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        nw = self.cfg.num_workers
        # drop_last in training: a ragged last batch breaks timm's Mixup (even batch)
        drop_last = train and len(ds) >= self.cfg.batch_size  # type: ignore[arg-type]
        return DataLoader(
            ds,
            batch_size=self.cfg.batch_size,
            shuffle=train,
            drop_last=drop_last,
            num_workers=nw,
            persistent_workers=nw > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def describe(self) -> str:
        return (
            f"{self.name}: {self.num_classes} classes, {self.in_chans} channel(s), native {self.native_size} px, "
            f"img_size {self.img_size}"
        )
