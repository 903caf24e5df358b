"""`fashion-mnist` and `mnist` from their idx files, read by torchvision's classes.

Source folder: ``cfg.data_dir``; else, for fashion-mnist, ``/usr/share/datasets/fashion-mnist``
when it exists (Debian's ``dataset-fashion-mnist``); else $VITPOS_CACHE/data. The four files
(``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``, each plain or ``.gz``) may sit in that folder or below it
(e.g. DIR/FashionMNIST/raw/). torchvision reads plain files from ROOT/<Class>/raw/, so unless
they are already laid out so, they are decompressed / copied once into
$VITPOS_CACHE/idx/<Class>-<key>/ (key: a hash of the source paths, sizes and mtimes), written
to a temporary folder and renamed into place (atomic; concurrent ranks are safe). The source
folder is never written to. ``cfg.download`` downloads into data_dir (or $VITPOS_CACHE/data).

Grayscale (``in_chans = 1``), 28 px, the data set's own mean / std. Val: ``holdout_size``
(default 5,000; at most 10 %) carved from the 60k train with a fixed seed (0); test: the 10k
t10k files. Train augmentation suited to it: ``random_crop_pad`` (4), optional hflip (fine for
clothes, not for digits), random erasing.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar

from torch.utils.data import Dataset
from torchvision import datasets as tvd

from ..errors import ConfigError
from .base import cache_dir
from .torchvision_sets import TorchvisionDataModule

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FASHION_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")


def find_idx_files(src: Path, max_depth: int = 3) -> dict[str, Path] | None:
    """The four idx files (plain preferred over .gz) from one folder at or below `src`, or None."""
    if not src.is_dir():
        return None
    folders = [src]
    for p in sorted(src.rglob("train-images-idx3-ubyte*")):
        if len(p.relative_to(src).parts) <= max_depth + 1 and p.parent not in folders:
            folders.append(p.parent)
    for folder in folders:
        found = {}
        for name in IDX_FILES:
            for cand in (folder / name, folder / f"{name}.gz"):
                if cand.is_file():
                    found[name] = cand
                    break
        if len(found) == len(IDX_FILES):
            return found
    return None


def prepare_idx_root(files: dict[str, Path], cls_name: str) -> Path:
    """A torchvision root (ROOT/<cls_name>/raw/<plain idx files>) holding `files`."""
    parent = {p.parent for p in files.values()}
    if len(parent) == 1 and all(p.suffix != ".gz" for p in files.values()):
        raw = parent.pop()
        if raw.name == "raw" and raw.parent.name == cls_name:
            return raw.parent.parent  # already torchvision's layout: read in place
    stamp = "|".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files.values())
    base = cache_dir() / "idx"
    root = base / f"{cls_name}-{hashlib.sha1(stamp.encode()).hexdigest()[:12]}"
    if (root / cls_name / "raw").is_dir():
        return root
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".tmp-"))
    try:
        raw = tmp / cls_name / "raw"
        raw.mkdir(parents=True)
        for name, src in files.items():
            opener = gzip.open if src.suffix == ".gz" else open
            with opener(src, "rb") as fin, open(raw / name, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        try:
            os.rename(tmp, root)
        except OSError:  # another process won the race: its copy is complete, use it
            if not (root / cls_name / "raw").is_dir():
                raise
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise ConfigError(f"cannot prepare idx files into {base}: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


class FashionMNISTDataModule(TorchvisionDataModule):
    name = "fashion-mnist"
    num_classes, in_chans, native_size = 10, 1, 28
    mean, std = (0.2860,), (0.3530,)
    tv_class: ClassVar[type] = tvd.FashionMNIST
    system_dir: ClassVar[Path | None] = FASHION_SYSTEM_DIR
    apt_hint: ClassVar[str] = "apt-get install dataset-fashion-mnist, "

    @property
    def root(self) -> Path:
        if self.cfg.data_dir:
            return Path(self.cfg.data_dir).expanduser()
        if self.system_dir is not None and self.system_dir.is_dir():
            return self.system_dir
        return cache_dir() / "data"

    def _missing(self, src: Path) -> ConfigError:
        searched = [src] + [self.system_dir] * (not self.cfg.data_dir and self.system_dir not in (None, src))
        where = " nor in ".join(map(str, searched))
        return ConfigError(
            f"{self.name}: no idx files ({', '.join(IDX_FILES)}, plain or .gz) in {where}; "
            f"{self.apt_hint}pass --data-dir DIR holding them, or pass --download"
        )

    def _tv_root(self) -> Path:
        src = self.root
        files = find_idx_files(src)
        if files is None and self.cfg.download:
            dest = Path(self.cfg.data_dir).expanduser() if self.cfg.data_dir else cache_dir() / "data"
            dest.mkdir(parents=True, exist_ok=True)
            try:
                self.tv_class(str(dest), train=True, download=True)
            except (RuntimeError, OSError) as e:
                raise ConfigError(f"{self.name}: download into {dest} failed: {str(e).splitlines()[0]}") from None
            src, files = dest, find_idx_files(dest)
        if files is None:
            raise self._missing(src)
        return prepare_idx_root(files, self.tv_class.__name__)

    def _open(self, split: str) -> Dataset:
        root = self._tv_root()
        try:
            return self.tv_class(str(root), train=split == "train", download=False)
        except (RuntimeError, OSError, ValueError, AssertionError) as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(f"{self.name}: cannot read the idx files prepared in {root} ({why})") from None

    def prepare_data(self) -> None:
        self._tv_root()  # find / download / decompress once, before the ranks read


class MNISTDataModule(FashionMNISTDataModule):
    name = "mnist"
    mean, std = (0.1307,), (0.3081,)
    tv_class = tvd.MNIST
    system_dir = None
    apt_hint = ""
