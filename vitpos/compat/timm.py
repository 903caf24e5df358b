"""Where vitpos reaches into timm beyond its documented API, and only here: a family's checkpoint filter.

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
)


def checkpoint_filter(model: nn.Module) -> Callable[[dict[str, Any], nn.Module], dict[str, Any]] | None:
    """``checkpoint_filter_fn(state, model)`` of ``model``'s timm family, or None where it has none."""
    return getattr(importlib.import_module(type(model).__module__), "checkpoint_filter_fn", None)
