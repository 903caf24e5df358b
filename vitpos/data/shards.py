"""`shards`: a set written by ``python -m vitpos.data.shard``, streamed with LitData.

    python train.py --data shards --data-dir DST          # DST: a folder, or a URL LitData streams from (s3://...)

Training reads ``DST/train`` through LitData's ``StreamingDataset`` / ``StreamingDataLoader``:

* **Once per epoch across ranks.** LitData splits the epoch's sample order between ranks and loader workers,
  each sample to exactly one of them, in ``floor(N / (batch x ranks))`` full batches per rank; the fewer than
  ``batch x ranks`` samples it leaves out come as one more batch on every rank, padded to full size with copies
  whose loss weight is 0 (:class:`vitpos.data.streaming.EveryOnceLoader`). So every rank takes the same number of
  steps and every sample is trained on once per epoch, whatever N; the loss is the mean over real samples.
* **Shuffled twice.** The writer stores the training samples in a shuffled order (``meta.json``'s ``shuffle``), so
  every shard file mixes the classes; each epoch the reader permutes the shard files, then all the samples inside
  each (LitData's item-level shuffle over the whole file, not its default blocks of 256). The order is a function of
  (``--seed``, epoch): a rerun or a resumed run draws the same order. Shards written in their source's order (by an
  older vitpos) are read, with a note to write them again: a class-sorted source gives batches of one class.
* **Mid-epoch resume.** The loader's position (epoch, samples yielded, seed) is a plain dict that Lightning
  stores in every checkpoint (``StreamingDataLoader.state_dict``); ``--resume`` from a checkpoint written
  mid-epoch (``--ckpt-every-n-steps``) continues with the next sample of that epoch.

Validation, test and the resolution evaluator read ``DST/val`` and ``DST/test`` by index through the same
``StreamingDataset`` (random access), so under DDP each image is scored once, by one rank: in training's validation
and test (``VitposDataModule._eval_sampler``) and in the evaluator, with the same sampler.
Images are decoded with PIL and go through the same transforms as the source set would
(``vitpos.data.transforms``); class names, channels, mean / std and native size come from ``DST/meta.json``.

A missing or damaged shard (no folder, meta.json or index.json, a chunk file missing or of the wrong size) is a
one-line ConfigError before anything is read; stored bytes that do not decode are a ConfigError naming the split
and sample (with ``num_workers > 0`` the DataLoader re-raises it with the worker's traceback attached).
Remote shards are cached on local disk as LitData does by default (``~/.lightning/chunks``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_only
from PIL import Image
from torch.utils.data import Dataset

from ..config import DataConfig
from ..errors import ConfigError
from .base import TransformDataset, VitposDataModule
from .images import DecodeError, open_image
from .transforms import train_transform

META = "meta.json"
FORMAT = 1  # of the stored samples; bump when their layout changes (the reader refuses a newer one)
HOW = "write them with python -m vitpos.data.shard --data NAME --out DIR"


def is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts]) if is_url(root) else str(Path(root, *parts))


def read_json(root: str, name: str) -> dict[str, Any]:
    """`root/name` parsed, from a folder or (through LitData's storage clients) a URL."""
    path = _join(root, name)
    try:
        if is_url(root):
            from ..compat.litdata import download  # LitData (and its cloud clients) only for shards

            with tempfile.TemporaryDirectory() as tmp:
                local = os.path.join(tmp, os.path.basename(name))
                download(path, local)
                return json.loads(Path(local).read_text())
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"shards: {path} not found; {HOW}") from None
    except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"shards: cannot read {path} ({why})") from None


def check_split(root: str, split: str) -> int:
    """The number of samples in ``root/split``; on a local folder every chunk file must be there, whole."""
    index = read_json(root, f"{split}/index.json")
    try:
        chunks = index["chunks"]
        total = sum(int(c["chunk_size"]) for c in chunks)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"shards: {_join(root, split, 'index.json')} is not a LitData index") from None
    if not is_url(root):
        for c in chunks:
            f = Path(root, split, c["filename"])
            if not f.is_file():
                raise ConfigError(f"shards: chunk file {f} is missing; {HOW}")
            if f.stat().st_size != int(c["chunk_bytes"]):
                raise ConfigError(
                    f"shards: chunk file {f} is corrupt ({f.stat().st_size} bytes, index.json says {c['chunk_bytes']})"
                )
    return total


def decode(data: bytes, in_chans: int, where: str) -> Image.Image:
    """Stored bytes -> PIL image with the set's channels; undecodable bytes are a ConfigError."""
    try:
        return open_image(data, "L" if in_chans == 1 else "RGB", where)
    except DecodeError as e:
        raise ConfigError(f"shards: cannot decode the image of {where} ({e.reason})") from None


class DecodeSample:
    """Sample dict -> (transform(image), label); picklable, runs in the loader workers."""

    def __init__(self, transform: Any, in_chans: int, where: str) -> None:
        self.transform, self.in_chans, self.where = transform, in_chans, where

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        img = decode(sample["image"], self.in_chans, f"{self.where} sample {sample.get('index')}")
        return self.transform(img), int(sample["label"])


class ShardSplit(Dataset):
    """One split read by index through a StreamingDataset: items (PIL image, int label).

    The StreamingDataset is opened lazily in each process that reads (loader workers included)."""

    def __init__(self, root: str, split: str, length: int, in_chans: int, classes: list[str]) -> None:
        self.root, self.split, self.length, self.in_chans, self.classes = root, split, length, in_chans, classes
        self._ds: Any = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ds": None, "_pid": -1}  # each worker opens its own

    def _open(self) -> Any:
        if self._ds is None or self._pid != os.getpid():
            from litdata import StreamingDataset

            self._ds, self._pid = StreamingDataset(_join(self.root, self.split)), os.getpid()
        return self._ds

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        if not 0 <= i < self.length:
            raise IndexError(f"index {i} out of range for {self.length} samples")
        sample = self._open()[i]
        return decode(sample["image"], self.in_chans, f"{self.split} sample {i}"), int(sample["label"])


class ShardsDataModule(VitposDataModule):
    name = "shards"

    def __init__(self, cfg: DataConfig, img_size: int, seed: int = 0) -> None:
        super().__init__(cfg, img_size, seed)
        if not cfg.data_dir:
            raise ConfigError(f"shards needs --data-dir DIR (or a URL) holding {META}; {HOW}")
        self.root = cfg.data_dir if is_url(cfg.data_dir) else str(Path(cfg.data_dir).expanduser())
        if not is_url(self.root) and not Path(self.root).is_dir():
            raise ConfigError(f"shards: no folder {self.root}; {HOW}")
        meta = read_json(self.root, META)
        if int(meta.get("format", 0)) > FORMAT:
            raise ConfigError(f"shards: {self.root} was written by a newer vitpos (format {meta['format']})")
        try:
            self.classes = [str(c) for c in meta["classes"]]
            self.num_classes, self.in_chans = int(meta["num_classes"]), int(meta["in_chans"])
            self.mean, self.std = tuple(meta["mean"]), tuple(meta["std"])
            self.native_size = int(meta["native_size"])
            self.source = str(meta["source"])
            self.shuffled = "train" in meta.get("shuffle", {})
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ConfigError(f"shards: {_join(self.root, META)} lacks a field vitpos needs; {HOW}") from None
        self._sizes: dict[str, int] = {}
        self._train_loader: Any = None
        self._train_transform: Any = None
        self._loader_state: dict[str, Any] | None = None

    def size(self, split: str) -> int:
        """Samples in `split` (checked against its index and chunk files once)."""
        self._check_split(split)
        if split not in self._sizes:
            self._sizes[split] = check_split(self.root, split)
        return self._sizes[split]

    def raw_split(self, split: str) -> Dataset:
        return ShardSplit(self.root, split, self.size(split), self.in_chans, self.classes)

    def train_dataset(self) -> Dataset:
        from litdata import StreamingDataset

        from ..compat.litdata import force_single_node_plan

        self.size("train")
        if not self.shuffled and rank_zero_only.rank == 0:
            print(
                f"vitpos: note: the shards in {self.root} were written in the order of their source (by an older "
                "vitpos); from a source sorted by class (an image folder) each batch holds one class. Write them "
                "again with python -m vitpos.data.shard --overwrite",
                file=sys.stderr,
                flush=True,
            )
        self._train_transform = train_transform(self.img_size, self.cfg, self.mean, self.std)
        transform = DecodeSample(self._train_transform, self.in_chans, _join(self.root, "train"))
        # Built in setup(), after the process group exists: LitData reads the ranks from it here.
        root = _join(self.root, "train")
        # item_shuffle_window=0: every sample of a shard file permuted, so a batch is drawn from the whole file
        ds = StreamingDataset(
            root, shuffle=True, seed=self.seed, drop_last=True, transform=transform, item_shuffle_window=0
        )
        return force_single_node_plan(ds)  # LitData's multi-node plan repeats samples; see vitpos.data.streaming

    def train_dataloader(self):
        from .streaming import EveryOnceLoader

        if self.train_resolutions:
            raise ConfigError("shards: --train-resolutions is not supported when streaming shards")
        if self.train_set is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        nw = self.cfg.num_workers
        read = TransformDataset(self.raw("train"), self._train_transform)  # the rest of the epoch, by index
        self._train_loader = EveryOnceLoader(
            self.train_set,
            read.__getitem__,
            batch_size=self.cfg.batch_size,
            num_workers=nw,
            persistent_workers=nw > 0,
            pin_memory=_cuda(),
        )
        if self._loader_state:  # resuming: continue the epoch at the next sample
            self._train_loader.load_state_dict(self._loader_state)
            self._loader_state = None
        return self._train_loader

    # The loader's position travels in the checkpoint through these two hooks. Lightning also stores a stateful
    # loader's state itself, but restores it only into a loader it builds after the checkpoint is read, and the
    # LR schedule (estimated_stepping_batches) builds the loader before that: its restore never happens.
    def state_dict(self) -> dict[str, Any]:
        return {"train_loader": self._train_loader.state_dict()} if self._train_loader is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loader_state = state_dict.get("train_loader")
        if self._loader_state and self._train_loader is not None:
            self._train_loader.load_state_dict(self._loader_state)
            self._loader_state = None

    def describe(self) -> str:
        return f"{super().describe()} (shards of {self.source} in {self.root})"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
