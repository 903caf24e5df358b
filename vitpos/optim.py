"""Optimisation: AdamW parameter groups and the learning-rate schedule (used by LitViT; the groups' order
is also the layout of the optimizer state in checkpoints, which vitpos.checkpoint follows when it upgrades one)."""

from __future__ import annotations

import math
from typing import Any

from torch import nn


def param_groups(
    model: nn.Module, weight_decay: float, lr: float, pos_lr_scale: float = 1.0, pos_weight_decay: float = 0.0
) -> list[dict[str, Any]]:
    """AdamW groups: no decay on norms, biases (1-D) and what the model names in no_weight_decay(); the position
    scheme's parameters (everything under ``model.pos``, whatever the scheme) at ``lr * pos_lr_scale`` with
    decay ``pos_weight_decay`` (AdamW's decay is decoupled: each step shrinks them by lr * scale * decay).

    With ``pos_lr_scale == 1`` and no position decay the position parameters stay in the two plain groups, the
    layout checkpoints written before the scale existed expect.
    """
    # Not timm's param_groups_weight_decay: it has no separate position learning rate, orders the no-decay group
    # first and drops empty groups, and the optimizer state of existing checkpoints is laid out in this order.
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {(p, d): [] for p in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_pos = (pos_lr_scale != 1.0 or pos_weight_decay != 0.0) and name.startswith("pos.")
        groups[is_pos, not (p.ndim <= 1 or name in skip)].append(p)
    return [
        {
            "params": params,
            "lr": lr * (pos_lr_scale if is_pos else 1),
            "weight_decay": pos_weight_decay if is_pos else weight_decay if decay else 0.0,
        }
        for (is_pos, decay), params in groups.items()
        if params or not is_pos  # the two plain groups always exist, as before
    ]


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """LR multiplier: linear warmup from ~0 to 1, then cosine to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t))
