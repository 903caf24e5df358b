"""`imagefolder`: your own images, DATA_DIR/{train,val[,test]}/<class>/*.{png,jpg,...}.

Read with torchvision's ``ImageFolder`` (classes = the sorted folder names of train/, which
val/ and test/ must match; hidden folders and files, such as ``.ipynb_checkpoints``, are not
read). test/ is optional: without it the test split is val/. RGB,
ImageNet mean / std, ``native_size`` = the training img_size (the images' own sizes are
whatever they are; the eval protocol resizes them).

Undecodable images fail loudly: loading one raises a one-line ConfigError naming the file
(``cannot decode image PATH: ...``), so that no image is silently dropped from an
evaluation. With ``num_workers > 0`` the DataLoader re-raises it in the main process with
the worker's traceback attached. ``verify_images()`` (``train.py --verify-images``) decodes
every file up front and lists all the bad ones.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

from ..config import DataConfig
from ..errors import ConfigError
from .base import VitposDataModule
from .images import DecodeError, open_image
from .torchvision_sets import IMAGENET_MEAN, IMAGENET_STD


def load_rgb(path: str) -> Image.Image:
    """Open an image as RGB (high bit depths scaled to 8 bits); a file PIL cannot decode is a ConfigError naming it."""
    try:
        return open_image(path, "RGB")
    except DecodeError as e:
        raise DecodeError(path, f"{e.reason}; train.py --verify-images lists every bad file of the set") from None


def visible_classes(folder: Path) -> list[str]:
    """The class folders of ``folder``: its sub-folders, sorted, less hidden ones (``.ipynb_checkpoints``, ...)."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


class VisibleImageFolder(ImageFolder):
    """torchvision's ImageFolder, blind to hidden folders and files (which it would take for classes and images)."""

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        classes = visible_classes(Path(directory))
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
        return classes, {c: i for i, c in enumerate(classes)}


class Visible:
    """``is_valid_file`` for :class:`VisibleImageFolder`: an image file with no hidden part below ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, path: str) -> bool:
        rel = Path(path).relative_to(self.root)
        return has_file_allowed_extension(path, IMG_EXTENSIONS) and not any(p.startswith(".") for p in rel.parts)


class ImageFolderDataModule(VitposDataModule):
    name = "imagefolder"
    in_chans = 3
    mean, std = IMAGENET_MEAN, IMAGENET_STD

    def __init__(self, cfg: DataConfig, img_size: int, seed: int = 0) -> None:
        super().__init__(cfg, img_size, seed)
        if not cfg.data_dir:
            raise ConfigError("imagefolder needs --data-dir DIR holding train/<class>/ and val/<class>/ image folders")
        self.root = Path(cfg.data_dir).expanduser()
        for split in ("train", "val"):
            if not (self.root / split).is_dir():
                raise ConfigError(
                    f"imagefolder: no {self.root / split}/ ; expected DIR/{{train,val}}/<class>/*.png|jpg"
                )
        self.classes = self._classes("train")
        if not self.classes:
            raise ConfigError(f"imagefolder: no class folders in {self.root / 'train'}")
        for split in ("val", "test"):
            if (self.root / split).is_dir() and self._classes(split) != self.classes:
                theirs = self._classes(split)
                lacks, extra = sorted(set(self.classes) - set(theirs)), sorted(set(theirs) - set(self.classes))
                differ = "; ".join(
                    [f"it lacks {', '.join(lacks)}"] * bool(lacks)
                    + [f"it has {', '.join(extra)} that train/ lacks"] * bool(extra)
                )
                raise ConfigError(
                    f"imagefolder: class folders of {self.root / split} differ from those of {self.root / 'train'}: "
                    f"{differ}"
                )
        if len(self.classes) < 2:
            raise ConfigError(
                f"imagefolder: {self.root / 'train'} has one class folder ({self.classes[0]}); "
                "a classifier needs two or more"
            )
        self.num_classes = len(self.classes)
        self.native_size = img_size

    def verify_images(self) -> list[str]:
        """Every file of train/, val/ and test/ that cannot be decoded (all are decoded once)."""
        bad = []
        for split in ("train", "val", "test"):
            if (self.root / split).is_dir():
                for path, _ in self.raw(split).samples:  # type: ignore[attr-defined]
                    try:
                        load_rgb(path)
                    except DecodeError:  # (an image over the pixel limit is a setting to change: raised)
                        bad.append(path)
        return bad

    def _classes(self, split: str) -> list[str]:
        return visible_classes(self.root / split)

    def raw_split(self, split: str) -> Dataset:
        folder = self.root / split
        if split == "test" and not folder.is_dir():
            folder = self.root / "val"
        try:
            return VisibleImageFolder(str(folder), loader=load_rgb, is_valid_file=Visible(folder))
        except FileNotFoundError as e:  # a class folder without a single image file
            raise ConfigError(f"imagefolder: {str(e).splitlines()[0]}") from None
