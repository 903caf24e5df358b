"""`digits`: scikit-learn's bundled 8x8 handwritten digits (``load_digits``), offline.

1,797 grayscale images (``in_chans = 1``), 10 classes, values 0..16 scaled to 0..255. The
raw 8x8 scans are resized bicubically straight to the requested size (train: img_size;
eval: R, under the config's eval protocol); ``native_size = 32`` is the nominal size to
train at. Split with a fixed seed (0, whatever the run seed): 10 % val, 20 % test, the
rest train. Mean / std are those of all pixels (0.3053 / 0.3759).
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .base import VitposDataModule


class ArrayImages(Dataset):
    """uint8 arrays (N, H, W) or (N, H, W, 3) and int labels -> (PIL image, int)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        return Image.fromarray(self.images[i]), int(self.labels[i])


class DigitsDataModule(VitposDataModule):
    name = "digits"
    num_classes = 10
    in_chans = 1
    mean = (0.3053,)
    std = (0.3759,)
    native_size = 32

    VAL_FRACTION, TEST_FRACTION = 0.1, 0.2

    def raw_split(self, split: str) -> Dataset:
        from sklearn.datasets import load_digits  # bundled with scikit-learn, no download

        d = load_digits()
        images = np.round(d.images * (255 / 16)).astype(np.uint8)  # (N, 8, 8)
        n = len(images)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(0)).numpy()
        n_val, n_test = round(self.VAL_FRACTION * n), round(self.TEST_FRACTION * n)
        idx = {"val": perm[:n_val], "test": perm[n_val : n_val + n_test], "train": perm[n_val + n_test :]}[split]
        idx = np.sort(idx)
        return ArrayImages(images[idx], d.target[idx])
