"""Where vitpos reaches into torchvision's internals, and only here: CIFAR whose files are checked for presence.

torchvision's CIFAR classes check every batch file's md5, which refuses re-packed copies and small test fixtures;
:class:`PresenceCheckedCIFAR` replaces that check (``_check_integrity``) by one that the files are there, and reads
the class names (``_load_meta``) without the md5 check either. tests/test_compat.py checks every name in
:data:`PRIVATE` against the installed torchvision.
"""

from __future__ import annotations

import os
import pickle

from torchvision import datasets as tvd

PRIVATE = (
    ("torchvision.datasets.CIFAR10", "_check_integrity"),
    ("torchvision.datasets.CIFAR10", "_load_meta"),
)


class PresenceCheckedCIFAR:
    """Mixed in before ``tvd.CIFAR10`` / ``tvd.CIFAR100``: its files must be present (md5 not checked)."""

    root: str
    base_folder: str
    train_list: list
    test_list: list
    meta: dict

    def _check_integrity(self) -> bool:
        files = [f for f, _ in self.train_list + self.test_list] + [self.meta["filename"]]
        return all(os.path.isfile(os.path.join(self.root, self.base_folder, f)) for f in files)

    def _load_meta(self) -> None:
        with open(os.path.join(self.root, self.base_folder, self.meta["filename"]), "rb") as f:
            self.classes = pickle.load(f, encoding="latin1")[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


class CIFAR10(PresenceCheckedCIFAR, tvd.CIFAR10):
    pass


class CIFAR100(PresenceCheckedCIFAR, tvd.CIFAR100):
    pass
