"""`cifar10`, `cifar100`, `svhn`, `stl10`, `flowers102` through torchvision's data set classes.

Files are read from ``cfg.data_dir`` (default: $VITPOS_CACHE/data, i.e. ~/.cache/vitpos/data)
in torchvision's layout (e.g. DIR/cifar-10-batches-py/data_batch_1 ...); they are downloaded
only when ``cfg.download`` is set. A missing, empty or incomplete directory is a ConfigError
that names the path and says how to get the data.

Splits: val is the official val split where one exists (flowers102); otherwise
``cfg.holdout_size`` images (at most 10 % of train) are carved from train with a fixed seed
(0, whatever the run seed), and ``holdout_size = 0`` makes val the test split. Test is the
official test split. For CIFAR the batch files are checked for presence, not md5 (torchvision
checks the md5, which refuses re-packed copies and test fixtures); the others keep
torchvision's own checks.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset, Subset
from torchvision import datasets as tvd

from ..compat.torchvision import CIFAR10 as _CIFAR10
from ..compat.torchvision import CIFAR100 as _CIFAR100
from ..errors import ConfigError
from .base import VitposDataModule, cache_dir, holdout_split

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class TorchvisionDataModule(VitposDataModule):
    """A torchvision data set; subclasses say which class, what files, and its constants."""

    expects: ClassVar[str] = ""  # what DIR must hold, for the error message
    official_val: ClassVar[bool] = False
    supports_train_limit = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.cfg.holdout_size < 0:
            raise ConfigError(f"holdout_size must be >= 0, got {self.cfg.holdout_size}")
        self._full_train: Dataset | None = None

    @property
    def root(self) -> Path:
        return Path(self.cfg.data_dir).expanduser() if self.cfg.data_dir else cache_dir() / "data"

    def _where_to_get_it(self) -> str:
        return f"pass --download, or put {self.expects} in {self.root}"

    def _construct(self, split: str, download: bool) -> Dataset:
        """torchvision's data set for official split `split` ('train' | 'val' | 'test')."""
        raise NotImplementedError

    def _open(self, split: str) -> Dataset:
        root, download = self.root, self.cfg.download
        if not download and (not root.is_dir() or not any(root.iterdir())):
            raise ConfigError(f"{self.name}: data dir {root} is missing or empty; {self._where_to_get_it()}")
        if download:
            root.mkdir(parents=True, exist_ok=True)
        try:
            return self._construct(split, download)
        except (RuntimeError, OSError, pickle.UnpicklingError, EOFError, KeyError) as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(
                f"{self.name}: cannot read the {split} files in {root} ({why}); {self._where_to_get_it()}"
            ) from None

    def prepare_data(self) -> None:
        # Runs once per node before setup (rank 0): the only place that may download under DDP.
        if self.cfg.download:
            for split in ("train", "val", "test") if self.official_val else ("train", "test"):
                self._open(split)

    def _train_and_holdout(self) -> tuple[Dataset, list[int], list[int]]:
        if self._full_train is None:
            self._full_train = self._open("train")
        n = len(self._full_train)  # type: ignore[arg-type]
        holdout = min(self.cfg.holdout_size, n // 10)
        train_idx, val_idx = holdout_split(n, holdout, seed=0)
        if 0 < self.cfg.train_limit < len(train_idx):  # the same images for every run seed
            keep, _ = holdout_split(len(train_idx), len(train_idx) - self.cfg.train_limit, seed=0)
            train_idx = [train_idx[i] for i in keep]
        return self._full_train, train_idx, val_idx

    def raw_split(self, split: str) -> Dataset:
        if split == "test" or (split == "val" and self.official_val):
            return self._open(split)
        if split == "val" and self.cfg.holdout_size == 0:
            return self.raw("test")
        full, train_idx, val_idx = self._train_and_holdout()
        idx = train_idx if split == "train" else val_idx
        return full if len(idx) == len(full) else Subset(full, idx)  # type: ignore[arg-type]


class CIFAR10DataModule(TorchvisionDataModule):
    name = "cifar10"
    num_classes, in_chans, native_size = 10, 3, 32
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    expects = "the CIFAR-10 python files (cifar-10-batches-py/)"
    tv_class: ClassVar[type] = _CIFAR10

    def _construct(self, split: str, download: bool) -> Dataset:
        return self.tv_class(str(self.root), train=split == "train", download=download)


class CIFAR100DataModule(CIFAR10DataModule):
    name = "cifar100"
    num_classes = 100
    mean, std = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
    expects = "the CIFAR-100 python files (cifar-100-python/)"
    tv_class = _CIFAR100


class SVHNDataModule(TorchvisionDataModule):
    """SVHN's train and test (the 'extra' split is not used)."""

    name = "svhn"
    num_classes, in_chans, native_size = 10, 3, 32
    mean, std = (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)
    expects = "train_32x32.mat and test_32x32.mat"

    def _construct(self, split: str, download: bool) -> Dataset:
        return tvd.SVHN(str(self.root), split=split, download=download)


class STL10DataModule(TorchvisionDataModule):
    """STL-10's labelled 5,000 train / 8,000 test images at 96 px (unlabelled images not used)."""

    name = "stl10"
    num_classes, in_chans, native_size = 10, 3, 96
    mean, std = (0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)
    expects = "the STL-10 binary files (stl10_binary/)"

    def _construct(self, split: str, download: bool) -> Dataset:
        return tvd.STL10(str(self.root), split=split, download=download)


class Flowers102DataModule(TorchvisionDataModule):
    """Oxford Flowers-102 with its official train / val / test splits (1,020 / 1,020 / 6,149);
    images vary in size (~500 px), native_size is the conventional 224."""

    name = "flowers102"
    num_classes, in_chans, native_size = 102, 3, 224
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    expects = "flowers-102/ (jpg/, imagelabels.mat, setid.mat)"
    official_val = True

    def _construct(self, split: str, download: bool) -> Dataset:
        return tvd.Flowers102(str(self.root), split=split, download=download)
