"""Opening image files as the 8-bit images the transforms take, whatever their bit depth.

PIL converts a 16-bit grayscale image (mode ``I;16``, or ``I`` for 32-bit integers) to ``L`` or ``RGB`` by clipping
at 255, which turns nearly every pixel white. Here the values are scaled instead: 16-bit and 32-bit integer images
as 16-bit data (0..65535 -> 0..255, as PIL opens a 16-bit file), float images (``F``) as 0..1. PIL's own
conversions are right for everything else (48-bit RGB PNGs open as 8-bit RGB).

PIL refuses an image over twice its pixel limit (``Image.MAX_IMAGE_PIXELS``, a guard against decompression bombs)
with a DecompressionBombError; :func:`open_image` makes it one line that names the file and the flag that raises
the limit (``--max-image-pixels``, :func:`set_pixel_limit`).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import ConfigError


class PixelLimitError(ConfigError):
    """An image over PIL's pixel limit: a setting to raise, not a broken file."""


class DecodeError(ConfigError):
    """A file PIL cannot decode; ``reason`` is PIL's word on it."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"cannot decode image {name}: {reason}")
        self.reason = reason


SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
PIXEL_FLAG = "--max-image-pixels"
PIL_LIMIT = Image.MAX_IMAGE_PIXELS


def set_pixel_limit(pixels: int | None) -> None:
    """Set PIL's pixel limit for this process and the workers it forks; None: PIL's own."""
    Image.MAX_IMAGE_PIXELS = int(pixels) if pixels is not None else PIL_LIMIT


def eight_bit(img: Image.Image, mode: str) -> Image.Image:
    """``img`` in ``mode`` ("L" or "RGB"), high bit depths scaled to 8 bits rather than clipped."""
    if img.mode in SIXTEEN_BIT or img.mode == "F":
        values = np.asarray(img, dtype=np.float64)
        scaled = values / 257.0 if img.mode != "F" else values * 255.0  # 65535 / 255 = 257
        img = Image.fromarray(np.clip(np.round(scaled), 0, 255).astype(np.uint8), "L")
    return img if img.mode == mode else img.convert(mode)


def open_image(source: str | Path | bytes, mode: str, name: str | None = None) -> Image.Image:
    """Decode a file (path) or its bytes fully into ``mode``; a file PIL cannot decode, or one over its pixel limit,
    is a one-line ConfigError naming ``name`` (default: the path)."""
    name = name or str(source)
    try:
        with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as img:
            img.load()  # the full decode, while the file is open
            return eight_bit(img, mode)
    except Image.DecompressionBombError as e:
        raise pixel_limit_error(name, e) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise DecodeError(name, str(e).splitlines()[0] if str(e) else type(e).__name__) from None


def pixel_limit_error(name: str, e: Exception) -> PixelLimitError:
    """The one line for an image over PIL's pixel limit (PIL refuses those over twice the limit)."""
    found = re.search(r"\((\d+) pixels\)", str(e))
    size = f"{int(found.group(1)):,} pixels" if found else "its size"
    return PixelLimitError(
        f"image {name} has {size}, over twice PIL's limit of {Image.MAX_IMAGE_PIXELS:,} (a guard against "
        f"decompression bombs); if the image is what it should be, raise the limit with {PIXEL_FLAG} N"
    )
