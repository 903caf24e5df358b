"""The DataModule base shared by every data family.

A family says what it is (``num_classes``, ``in_chans``, ``mean``, ``std``, ``native_size``)
and how to read one split without transforms (``raw_split(split)`` -> (PIL image, int)); the
base adds the transforms, the loaders and ``eval_dataset(R)`` for resolution transfer.
Families that render natively (``shapes``) override ``train_dataset`` / ``eval_dataset`` /
``train_dataset_at``.

Multi-resolution training (``train_resolutions``, set from ``--train-resolutions``): every
training batch is at ONE resolution, drawn per batch by :class:`MultiResBatchSampler` as a pure
function of (seed, epoch, batch index); no global RNG, so every DDP rank draws the same
resolution at the same step without communicating (each rank's DistributedSampler yields the
same number of batches). The sampler yields ``(index, resolution)`` keys and
:class:`MultiResDataset` serves them: rendered natively where the family can
(``train_dataset_at``), else the img_size batch, already transformed, is resized (bicubic,
antialiased) in the loader (in the workers when ``num_workers`` > 0). Validation and test stay at
img_size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, Sampler

from ..compat.lightning import mid_epoch
from ..config import DataConfig
from ..errors import ConfigError
from ..regime import Window
from ..resolution import to_hw
from .images import set_pixel_limit
from .resumable import EpochSeedSampler, ResumableLoader, StatefulDistributedSampler
from .transforms import check_data_config, eval_transform, train_transform

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


def batch_resolution(resolutions: list[int], seed: int, epoch: int, index: int) -> int:
    """The resolution of batch ``index`` of ``epoch``: a pure function of its arguments (same on every rank)."""
    key = ((seed * 1_000_003 + epoch) * 1_000_003 + index) % (2**63 - 1)
    g = torch.Generator().manual_seed(key)
    return resolutions[int(torch.randint(len(resolutions), (1,), generator=g))]


class MultiResBatchSampler(BatchSampler):
    """Batches of ``(index, resolution)`` keys, one resolution per batch (see the module docstring).

    The epoch is the one Lightning sets on ``sampler`` (``set_epoch``, which a DistributedSampler
    has; the single-device loader uses a one-replica DistributedSampler for the same reason), so a
    resumed run draws the same resolutions as an uninterrupted one.
    """

    def __init__(
        self, sampler: Sampler[int], batch_size: int, drop_last: bool, *, resolutions: list[int], seed: int = 0
    ):
        super().__init__(sampler, batch_size, drop_last)
        if not resolutions:
            raise ValueError("MultiResBatchSampler needs at least one resolution")
        self.resolutions, self.seed = [int(r) for r in resolutions], int(seed)

    def __iter__(self):
        epoch = int(getattr(self.sampler, "epoch", 0))
        for b, batch in enumerate(super().__iter__()):
            r = batch_resolution(self.resolutions, self.seed, epoch, b)
            yield [(i, r) for i in batch]


class MultiResDataset(Dataset):
    """Serves ``(index, resolution)`` keys of one batch at that one resolution.

    ``render(hw)`` returns the training set rendered natively at (H, W); without it the items of
    ``base`` (already transformed, at img_size) are stacked and resized (bicubic, antialiased).
    """

    def __init__(self, base: Dataset, render: Any = None) -> None:
        self.base, self.render = base, render

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[tuple[torch.Tensor, int]]:
        sizes = {r for _, r in keys}
        if len(sizes) != 1:
            raise ValueError(f"a multi-resolution batch must have one resolution, got {sorted(sizes)}")
        hw = to_hw(sizes.pop())
        idx = [i for i, _ in keys]
        ds = self.render(hw) if self.render is not None else self.base
        items = ds.__getitems__(idx) if hasattr(ds, "__getitems__") else [ds[i] for i in idx]
        x = torch.stack([xi for xi, _ in items])  # (B, C, H, W)
        if x.shape[-2:] != hw:
            x = F.interpolate(x, size=hw, mode="bicubic", antialias=True, align_corners=False)
        return [(xi, int(yi)) for xi, (_, yi) in zip(x, items, strict=True)]

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int]:
        return self.__getitems__([key])[0]


def holdout_split(n: int, holdout: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Fixed-seed (train, val) index lists carving `holdout` of n items for val."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(perm[holdout:]), sorted(perm[:holdout])


class VitposDataModule(L.LightningDataModule):
    """Base class: loaders from ``cfg`` (batch_size, num_workers) and the eval protocol.

    Under DDP every loader takes a per-rank sampler from here (the Trainer is told not to add its own): training
    the rank's part of a shuffle of (seed, epoch), validation and test one that does not pad (each image scored
    once). ``train_resolutions`` (empty: off) switches the training loader to one resolution per batch
    (see the module docstring); the training run sets it from ``cfg.trainer.train_resolutions``.
    The training loader's state is in every checkpoint written inside an epoch, and a mid-epoch resume continues
    it (:mod:`vitpos.data.resumable`)."""

    name: ClassVar[str] = ""
    supports_train_limit: ClassVar[bool] = False  # sets that honour cfg.train_limit
    num_classes: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    native_size: int

    def __init__(self, cfg: DataConfig, img_size: int, seed: int = 0) -> None:
        super().__init__()
        check_data_config(cfg)
        if cfg.train_limit and not self.supports_train_limit:
            raise ConfigError(f"--train-limit is not available for data set '{cfg.name}'")
        to_hw(img_size)
        set_pixel_limit(cfg.max_image_pixels)  # PIL's, process-wide: loader workers fork with it
        self.cfg, self.img_size, self.seed = cfg, img_size, seed
        if cfg.mean is not None:  # normalisation asked for (a pretrained model's) instead of the data set's
            self.mean, self.std = tuple(cfg.mean), tuple(cfg.std)
        self._raw: dict[str, Dataset] = {}
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self.train_resolutions: list[int] = []
        self.train_loader: ResumableLoader | None = None
        self.train_loader_state: dict[str, Any] | None = None  # a checkpoint's, for the next training loader

    # -- what a family provides -------------------------------------------------------------
    def raw_split(self, split: str) -> Dataset:
        """Split `split` without transforms: items (PIL image, int label)."""
        raise NotImplementedError

    def verify_images(self) -> list[str]:
        """Files of the set that cannot be decoded (``--verify-images``); sets not read from image files have none."""
        return []

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

    def train_dataset_at(self, hw: tuple[int, int]) -> Dataset | None:
        """The training set rendered natively at (H, W), for multi-resolution training; None (the
        default): the family cannot, and the img_size batch is resized instead."""
        return None

    def eval_dataset(
        self, resolution: int | tuple[int, int], split: str = "val", window: Window | None = None
    ) -> Dataset:
        """Split `split` at `resolution` (R or (H, W)) under the eval protocol of the config: items (normalised
        tensor (C, H, W), int label). With a ``window`` (the canvas regime, see vitpos.regime) the image is brought
        to the window's size and padded with black around it."""
        self._check_split(split)
        return TransformDataset(self.raw(split), eval_transform(resolution, self.cfg, self.mean, self.std, window))

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            self.train_set = self.train_dataset()
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self.eval_dataset(self.img_size, "val")
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self.eval_dataset(self.img_size, "test")

    # -- loaders ------------------------------------------------------------------------------
    def _world(self) -> tuple[int, int]:
        """(world size, this process's global rank) of the Trainer, (1, 0) without one."""
        trainer = self.trainer
        return (1, 0) if trainer is None else (trainer.world_size, trainer.global_rank)

    def _loader(self, ds: Dataset | None, train: bool) -> DataLoader:
        if ds is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        nw = self.cfg.num_workers
        # drop_last in training: a ragged last batch breaks timm's Mixup (even batch)
        drop_last = train and len(ds) >= self.cfg.batch_size  # type: ignore[arg-type]
        kwargs = dict(batch_size=self.cfg.batch_size, drop_last=drop_last, num_workers=nw, persistent_workers=nw > 0,
                      pin_memory=torch.cuda.is_available())  # fmt: skip
        if train:
            world, rank = self._world()
            # one process: torch's shuffle; DDP: each rank's part of a shuffle of (seed, epoch), as Lightning's own
            sampler: Sampler[int] = EpochSeedSampler(ds)
            if world > 1:
                sampler = StatefulDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=self.seed)
            return self._resumable(ResumableLoader(ds, sampler=sampler, **kwargs))
        return DataLoader(ds, sampler=self._eval_sampler(ds), **kwargs)

    def _resumable(self, loader: ResumableLoader) -> ResumableLoader:
        """``loader`` as the training loader, continuing the epoch of a checkpoint's state if one came."""
        if self.train_loader_state:
            loader.load_state_dict(self.train_loader_state)
            self.train_loader_state = None
        self.train_loader = loader
        return loader

    def _eval_sampler(self, ds: Dataset) -> Sampler[int] | None:
        """Under DDP, rank r scores items r, r + W, ...: each once. A sampler that pads every rank to the same count
        with duplicates would count them twice. Ranks may then differ by one batch, which is safe here: evaluation
        has no per-step collective (metrics sync their sums at the end)."""
        world, rank = self._world()
        if world == 1:
            return None
        n = len(ds)  # type: ignore[arg-type]
        if n < world:  # a rank without a batch would leave the others waiting for it
            raise ConfigError(f"{n} evaluation image(s) cannot be spread over {world} ranks; use fewer devices")
        return UnrepeatedDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)

    def train_dataloader(self) -> DataLoader:
        if not self.train_resolutions:
            return self._loader(self.train_set, train=True)
        if self.train_set is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        ds = self.train_set
        native = self.train_dataset_at(to_hw(self.img_size)) is not None
        nw = self.cfg.num_workers
        world, rank = self._world()
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=self.seed)
        batches = MultiResBatchSampler(
            sampler,
            self.cfg.batch_size,
            drop_last=len(ds) >= self.cfg.batch_size,  # type: ignore[arg-type]
            resolutions=self.train_resolutions,
            seed=self.seed,
        )
        loader = ResumableLoader(
            MultiResDataset(ds, self.train_dataset_at if native else None),
            batch_sampler=batches,
            num_workers=nw,
            persistent_workers=nw > 0,
            pin_memory=torch.cuda.is_available(),
        )
        return self._resumable(loader)

    # The training loader's state travels in checkpoints written inside an epoch through these two hooks.
    def state_dict(self) -> dict[str, Any]:
        trainer = self.trainer
        if self.train_loader is None or trainer is None or not mid_epoch(trainer):
            return {}
        return {"train_loader": self.train_loader.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.train_loader_state = state_dict.get("train_loader")

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
