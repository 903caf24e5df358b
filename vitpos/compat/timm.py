"""Where vitpos reaches into timm beyond its documented API, and only here: a family's checkpoint filter, and
RandAugment's posterize ops.

Each timm model family converts the original checkpoints of its papers (naver's RoPE-ViT, Microsoft's BEiT, the JAX
ViTs) with a module-level ``checkpoint_filter_fn`` beside its model class, which timm's own pretrained loader finds
by the family's module. :func:`checkpoint_filter` finds it the same way for a weights file read without timm's loader.
tests/test_compat.py checks every name in :data:`PRIVATE` against the installed timm.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from torch import nn

# the families vitpos converts (vitpos.interop.FAMILIES)
PRIVATE = (
    ("timm.models.vision_transformer", "checkpoint_filter_fn"),
    ("timm.models.eva", "checkpoint_filter_fn"),
    ("timm.models.beit", "checkpoint_filter_fn"),
    # RandAugment's ops and, on each, its name and the function it applies (posterize_to_black)
    ("timm.data.auto_augment.RandAugment", "ops"),
    ("timm.data.auto_augment.AugmentOp", "name"),
    ("timm.data.auto_augment.AugmentOp", "aug_fn"),
)


def checkpoint_filter(model: nn.Module) -> Callable[[dict[str, Any], nn.Module], dict[str, Any]] | None:
    """``checkpoint_filter_fn(state, model)`` of ``model``'s timm family, or None where it has none."""
    return getattr(importlib.import_module(type(model).__module__), "checkpoint_filter_fn", None)


def _posterize(img: Any, bits_to_keep: int, **_: Any) -> Any:
    """Keep ``bits_to_keep`` (0-8) high bits of each channel; none is a black image, as in the TF reference."""
    from PIL import ImageOps

    return ImageOps.posterize(img, bits_to_keep) if bits_to_keep > 0 else img.point(lambda _: 0)


def posterize_to_black(randaugment: Any) -> Any:
    """``randaugment`` (timm's RandAugment) with posterize taking 0 bits as a black image.

    timm's increasing posterize keeps 4 down to 0 bits as the magnitude rises, and magnitude noise (``mstd``) reaches
    the top of the range: ``rand-m9-mstd0.5-inc1`` asks for 0 bits about once in 600 images. Pillow refuses fewer
    than 1 bit with a ValueError, which would end a training run mid-epoch."""
    for op in randaugment.ops:
        if op.name.startswith("Posterize"):
            op.aug_fn = _posterize
    return randaugment
