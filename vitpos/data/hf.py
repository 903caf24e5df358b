"""`hf:NAME_OR_PATH`: a Hugging Face ``datasets`` set with an image column and a label column.

    python train.py --data hf:/data/my-set            # a folder written by Dataset(Dict).save_to_disk
    python train.py --data hf:user/name --download    # load_dataset(NAME): the hub only with --download

A folder is read with ``datasets.load_from_disk``. A name is read with ``datasets.load_dataset`` from the
local cache, offline (``HF_HUB_OFFLINE``), unless ``--download`` is given. Columns: the image column is the
first ``datasets.Image`` feature (else a column named image / img), the label column the first
``ClassLabel`` (else label / labels); class names come from the ``ClassLabel``.

Splits: train = ``train``; val = ``validation`` / ``val`` / ``valid``, else ``holdout_size`` images (at most
10 %) carved from train with a fixed seed (0), as for the torchvision sets; test = ``test``, else val. A
saved single ``Dataset`` is the train split. Channels: 1 when the first image is grayscale (mode L), else 3
(RGB), with ImageNet mean / std for RGB and 0.5 / 0.5 for grayscale; ``native_size`` = img_size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PIL import Image
from torch.utils.data import Dataset

from ..config import DataConfig
from ..errors import ConfigError
from .base import VitposDataModule, holdout_split
from .images import eight_bit
from .torchvision_sets import IMAGENET_MEAN, IMAGENET_STD

VAL_NAMES = ("validation", "val", "valid")


class HFImages(Dataset):
    """Rows of one HF split (optionally only `indices`): items (PIL image, int label)."""

    def __init__(self, ds: Any, image_col: str, label_col: str, in_chans: int, indices: list[int] | None = None):
        self.ds, self.image_col, self.label_col, self.in_chans = ds, image_col, label_col, in_chans
        self.indices = indices
        self._raw: Any = None

    def __len__(self) -> int:
        return len(self.indices) if self.indices is not None else len(self.ds)

    def _row(self, i: int) -> int:
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} rows")
        return self.indices[i] if self.indices is not None else i

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        row = self.ds[self._row(i)]
        img = row[self.image_col]
        if not isinstance(img, Image.Image):
            raise ConfigError(f"hf: column '{self.image_col}' does not hold images (got {type(img).__name__})")
        return eight_bit(img, "L" if self.in_chans == 1 else "RGB"), int(row[self.label_col])

    def encoded(self, i: int) -> tuple[bytes, int]:
        """The image's bytes as stored (no decode), for ``vitpos.data.shard``."""
        import datasets

        if self._raw is None:
            self._raw = self.ds.cast_column(self.image_col, datasets.Image(decode=False))
        row = self._raw[self._row(i)]
        img = row[self.image_col]
        data = img.get("bytes") or Path(img["path"]).read_bytes()
        return data, int(row[self.label_col])


def _load(spec: str, download: bool) -> Any:
    if not download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read before `datasets` is imported: the cache only
    try:
        import datasets
    except ImportError:
        raise ConfigError("hf: needs the `datasets` package (pip install 'vitpos[hf]')") from None

    path = Path(spec).expanduser()
    try:
        if path.is_dir():
            return datasets.load_from_disk(str(path))
        if not download:
            datasets.config.HF_HUB_OFFLINE = True  # also when `datasets` was imported before this call
        return datasets.load_dataset(spec)
    except (FileNotFoundError, ValueError, OSError, ConnectionError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        hint = "" if download else "; a name is read from the local cache only, unless --download is given"
        raise ConfigError(f"hf: cannot load '{spec}' ({why}){hint}") from None
    except Exception as e:  # `datasets` raises its own types for a missing set or a bad folder
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"hf: cannot load '{spec}' ({type(e).__name__}: {why})") from None


def _columns(features: Any) -> tuple[str, str]:
    import datasets

    image = [k for k, f in features.items() if isinstance(f, datasets.Image)]
    label = [k for k, f in features.items() if isinstance(f, datasets.ClassLabel)]
    image = image or [k for k in ("image", "img") if k in features]
    label = label or [k for k in ("label", "labels") if k in features]
    if not image or not label:
        raise ConfigError(f"hf: need an image column and a label column; the set has {', '.join(features)}")
    return image[0], label[0]


class HFDataModule(VitposDataModule):
    name = "hf"

    def __init__(self, cfg: DataConfig, img_size: int, seed: int = 0) -> None:
        super().__init__(cfg, img_size, seed)
        spec = cfg.name.split(":", 1)[1]
        if cfg.holdout_size < 0:
            raise ConfigError(f"holdout_size must be >= 0, got {cfg.holdout_size}")
        loaded = _load(spec, cfg.download)
        self.splits: dict[str, Any] = dict(loaded) if hasattr(loaded, "keys") else {"train": loaded}
        if "train" not in self.splits:
            raise ConfigError(f"hf: '{spec}' has no train split (it has {', '.join(self.splits)})")
        train = self.splits["train"]
        self.image_col, self.label_col = _columns(train.features)
        feature = train.features[self.label_col]
        names = getattr(feature, "names", None)
        if names:
            self.classes = [str(n) for n in names]
        else:  # plain integer labels: 0..max
            self.classes = [str(i) for i in range(int(max(train[self.label_col])) + 1)]
        self.num_classes = len(self.classes)
        first = train[0][self.image_col]
        self.in_chans = 1 if getattr(first, "mode", "RGB") in ("L", "1", "I;16", "I") else 3
        self.mean, self.std = (IMAGENET_MEAN, IMAGENET_STD) if self.in_chans == 3 else ((0.5,), (0.5,))
        self.native_size = img_size
        self.name = f"hf:{spec}"  # type: ignore[misc]

    def _wrap(self, ds: Any, indices: list[int] | None = None) -> HFImages:
        return HFImages(ds, self.image_col, self.label_col, self.in_chans, indices)

    def raw_split(self, split: str) -> Dataset:
        val = next((self.splits[n] for n in VAL_NAMES if n in self.splits), None)
        if split == "test" and "test" in self.splits:
            return self._wrap(self.splits["test"])
        if split in ("val", "test") and val is not None:
            return self._wrap(val)
        train = self.splits["train"]
        holdout = min(self.cfg.holdout_size, len(train) // 10)
        if split in ("val", "test") and holdout == 0:
            if "test" in self.splits:
                return self._wrap(self.splits["test"])
            raise ConfigError("hf: no validation or test split, and holdout_size is 0")
        if val is not None or holdout == 0:
            return self._wrap(train)
        train_idx, val_idx = holdout_split(len(train), holdout, seed=0)
        return self._wrap(train, train_idx if split == "train" else val_idx)
