"""Optimisation: AdamW parameter groups and the learning-rate schedule (used by LitViT; the groups' order is also
the layout of the optimizer state in checkpoints, which a resumed run reads back)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def param_groups(
    model: nn.Module,
    weight_decay: float,
    lr: float,
    pos_lr_scale: float = 1.0,
    pos_weight_decay: float = 0.0,
    pos_decay_to: str = "zero",
) -> list[dict[str, Any]]:
    """AdamW groups: no decay on norms, biases (1-D) and what the model names in no_weight_decay(); the position
    scheme's parameters (everything under ``model.pos``, whatever the scheme) at ``lr * pos_lr_scale`` with
    decay ``pos_weight_decay`` towards ``pos_decay_to``: "zero" (AdamW's decoupled decay: each step shrinks them by
    lr * scale * decay) or "start" (the same pull towards their values at the first step: :class:`AdamW`).

    With ``pos_lr_scale == 1`` and no position decay the position parameters train like every other parameter and
    stay in the two plain groups; the optimizer state of such a run's checkpoints is indexed in that layout.
    """
    # Not timm's param_groups_weight_decay: it has no separate position learning rate, orders the no-decay group
    # first and drops empty groups; this order is the layout of the optimizer state a checkpoint holds.
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {(p, d): [] for p in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_pos = (pos_lr_scale != 1.0 or pos_weight_decay != 0.0) and name.startswith("pos.")
        groups[is_pos, not (p.ndim <= 1 or name in skip)].append(p)
    if pos_decay_to not in ("zero", "start"):
        raise ValueError(f"pos_decay_to must be zero or start, got {pos_decay_to!r}")
    to_start = pos_decay_to == "start"
    return [
        {
            "params": params,
            "lr": lr * (pos_lr_scale if is_pos else 1),
            "weight_decay": (0.0 if to_start else pos_weight_decay) if is_pos else weight_decay if decay else 0.0,
            **({"pos_lr_scale": pos_lr_scale} if is_pos else {}),  # what the schedule's position ramp rises to
            **({"decay_to_start": pos_weight_decay} if is_pos and to_start else {}),
        }
        for (is_pos, decay), params in groups.items()
        if params or not is_pos  # the two plain groups always exist
    ]


class AdamW(torch.optim.AdamW):
    """torch's AdamW, plus a decay towards where training started for the groups that ask for it.

    A group with ``decay_to_start`` = w pulls each of its parameters p, like AdamW's own decoupled decay, by
    lr * w * (p - p0) every step, where p0 is p's value at the first step: the prior is the initialisation (or the
    pretrained weights of a fine-tune), not zero (L2-SP, Li et al. 2018). Under Adam a parameter that the loss keeps
    pushing settles about 1/w from p0, while one whose gradient is only noise takes steps of about lr whatever its
    gradient's size and so random-walks: the pull bounds that walk to about sqrt(lr / 2w) instead of letting it grow
    with the square root of the step count. p0 is kept in the optimizer state (``state[p]["start"]``), so a resumed
    run keeps pulling towards the same values.
    """

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # gradients first (Lightning passes the forward and backward as the closure)
            with torch.enable_grad():
                loss = closure()
        first = []
        for group in self.param_groups:
            rate = group["lr"] * group.get("decay_to_start", 0.0)
            for p in group["params"] if rate else []:
                if p.grad is None:
                    continue
                if "start" in self.state[p]:
                    p.sub_(p - self.state[p]["start"], alpha=rate)
                else:
                    first.append((p, p.detach().clone()))
        super().step()
        for p, start in first:  # after the step: AdamW fills an empty state with its moments itself
            self.state[p]["start"] = start
        return loss


def pos_ramp(step: int, ramp: int, scale: float) -> float:
    """The position group's own LR factor on top of the schedule: it trains at the plain lr at step 0 (1 / scale of
    its group's lr), rising linearly to lr x scale at step ``ramp``."""
    if ramp <= 0:
        return 1.0
    return (1 + (scale - 1) * min(1.0, step / ramp)) / scale


def lr_lambdas(groups: list[dict[str, Any]], warmup: int, total: int, min_ratio: float, pos_ramp_steps: int) -> list:
    """One LR multiplier per group for LambdaLR: warm-up and cosine for all; the position group's ramp on top."""

    def plain(step: int) -> float:
        return warmup_cosine(step, warmup, total, min_ratio)

    def ramped(scale: float):
        return lambda step: plain(step) * pos_ramp(step, pos_ramp_steps, scale)

    return [ramped(g["pos_lr_scale"]) if "pos_lr_scale" in g else plain for g in groups]


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """LR multiplier: linear warmup from ~0 to 1, then cosine to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t))
