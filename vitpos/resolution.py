"""Image resolutions as the user writes them (``32``, ``24x48``) and as the code uses them (``(H, W)``).

One place for parsing, normalising and labelling, so that evaluation, export, the data modules and
the tables all read and print a resolution the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .errors import ConfigError

Resolution = int | tuple[int, int]  # R (square) or (H, W)


def parse_resolution(text: str | int | Sequence[int]) -> Resolution:
    """'32' -> 32, '24x48' -> (24, 48) (height x width), (H, H) -> H; anything else is a ConfigError."""
    if isinstance(text, int) and not isinstance(text, bool):
        hw = (text, text)
    elif isinstance(text, str) and re.fullmatch(r"\s*-?\d+\s*", text):
        hw = (int(text), int(text))
    elif isinstance(text, str) and re.fullmatch(r"\s*-?\d+\s*[xX]\s*-?\d+\s*", text):
        h, w = re.split(r"[xX]", text)
        hw = (int(h), int(w))
    elif isinstance(text, tuple | list) and len(text) == 2 and all(isinstance(v, int) for v in text):
        hw = (int(text[0]), int(text[1]))
    else:
        raise ConfigError(f"resolution must be an integer R or HxW (e.g. 32 or 24x48), got {text!r}")
    if hw[0] <= 0 or hw[1] <= 0:
        raise ConfigError(f"resolution must be positive, got {text!r}")
    return hw[0] if hw[0] == hw[1] else hw


def to_hw(resolution: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """R -> (R, R); (H, W) -> (H, W); anything else is a ConfigError."""
    if isinstance(resolution, int) and not isinstance(resolution, bool):
        hw = (resolution, resolution)
    elif isinstance(resolution, tuple | list) and len(resolution) == 2:
        hw = tuple(resolution)
    else:
        raise ConfigError(f"resolution must be an int R or a pair (H, W), got {resolution!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in hw):
        raise ConfigError(f"resolution must hold positive ints, got {resolution!r}")
    return hw  # type: ignore[return-value]


def resolution_label(resolution: Resolution | list[int]) -> str:
    """32 or (32, 32) -> '32'; (24, 48) -> '24x48' (the form parse_resolution reads back)."""
    h, w = to_hw(resolution)
    return str(h) if h == w else f"{h}x{w}"
