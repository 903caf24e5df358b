"""The two regimes of resolution transfer, and where the trained view sits on a larger canvas.

* **zoom**: the image at the new size shows the same scene, larger: the token grid grows *and* every object
  covers more pixels, so a patch sees a different scale of the same content. This is what resizing a photo does.
* **canvas**: the scene keeps the size in pixels it had in training and sits in a window of the training size on a
  larger canvas of background. Only the token grid grows: position extrapolation alone (plus the background tokens
  the canvas adds, which the evaluator's controls separate from it).

A :class:`Canvas` says where that window goes: ``place`` centres it (``centre``) or puts it at the top-left corner
(``corner``), on the patch grid; ``shift`` then moves it by that many pixels along both axes, so a shift that is not
a multiple of the patch size cuts every object differently from training (the alignment control).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

REGIMES = ("zoom", "canvas")
PLACES = ("centre", "corner")


@dataclass(frozen=True)
class Window:
    """Where the scene lies on the image, in pixels: rows top..top+height, columns left..left+width."""

    top: int
    left: int
    height: int
    width: int

    def token_mask(self, image_hw: tuple[int, int], patch: int) -> Tensor:
        """(h, w) bool: the patches whose centre lies inside the window (what pooling over the scene keeps)."""
        h, w = image_hw[0] // patch, image_hw[1] // patch
        cy = torch.arange(h) * patch + patch / 2
        cx = torch.arange(w) * patch + patch / 2
        rows = (cy >= self.top) & (cy < self.top + self.height)
        cols = (cx >= self.left) & (cx < self.left + self.width)
        return rows[:, None] & cols[None, :]


@dataclass(frozen=True)
class Canvas:
    """The canvas regime's placement of a window of the training size (see the module docstring)."""

    place: str = "centre"
    shift: int = 0

    def __post_init__(self) -> None:
        if self.place not in PLACES:
            raise ValueError(f"canvas place must be one of {', '.join(PLACES)}, got '{self.place}'")
        if self.shift < 0:
            raise ValueError(f"canvas shift must be >= 0 pixels, got {self.shift}")

    def window(self, image_hw: tuple[int, int], trained_hw: tuple[int, int], patch: int) -> Window:
        """The window of size ``trained_hw`` on an image of ``image_hw``; it must fit, shift included."""
        (h, w), (th, tw) = image_hw, trained_hw
        if self.place == "corner":
            top = left = 0
        else:  # centred, rounded down onto the patch grid
            top, left = (h - th) // 2 // patch * patch, (w - tw) // 2 // patch * patch
        top, left = top + self.shift, left + self.shift
        if top + th > h or left + tw > w:
            raise ValueError(
                f"a {th}x{tw} px scene placed at the {self.place} shifted by {self.shift} px does not fit a {h}x{w} px "
                "canvas: the canvas regime serves sizes at least the training size"
            )
        return Window(top, left, th, tw)


def full_window(image_hw: tuple[int, int]) -> Window:
    """The zoom regime's window: the whole image."""
    return Window(0, 0, image_hw[0], image_hw[1])
