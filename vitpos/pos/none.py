"""`none`: no position at all. With the patch stem the ViT sees an unordered bag of patches."""

from __future__ import annotations

from .base import PosScheme


class NoPos(PosScheme):
    """Adds nothing, rotates nothing, biases nothing; any grid is served as it is."""

    methods = ("none",)
