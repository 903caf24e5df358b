"""Checkpoint formats: each older format brought to the next by a pure function of the loaded dict.

A checkpoint names its format (``vitpos_format``; none means 1). :func:`migrate` applies the steps from its format
to :data:`FORMAT` in order, each returning a new dict and leaving its argument as it was; the running code reads
only the current format. A step that needs to know the model's layout builds the model of the checkpoint's own
config (its parameter names and shapes), never the training code.

1 -> 2: RoPE pairs (x[j], x[j + d/2]) ("rotate-half") became (x[2j], x[2j+1]) (interleaved).
2 -> 3: ``optim.pos_lr_scale`` appeared (before: 1); bias schemes with a class token learn its bias (``prefix_bias``;
        before: 0).
3 -> 4: ``optim.pos_decay_to`` and ``optim.pos_lr_warmup_epochs`` appeared (before: zero, AdamW's decay, and 0).
4 -> 5: `relbias` tables start from a distance penalty unless told otherwise (``locality`` 1; before: 0, noise
        alone).
5 -> 6: `rope2d-norm` is a preset of `rope2d`: its options base and normalize are rope2d's theta and coords, and its
        augmentation (shift, jitter, rescale) is ``model.pos_aug``, shared by every scheme.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import torch

from .config import Config, model_from_config
from .model import ViT

Checkpoint = dict[str, Any]

_QKV = re.compile(r"blocks\.\d+\.attn\.qkv\.(weight|bias)$")


def _config(ckpt: Checkpoint) -> dict[str, Any]:
    return ckpt["hyper_parameters"]["config"]


def _with_config(ckpt: Checkpoint, config: dict[str, Any]) -> Checkpoint:
    return {**ckpt, "hyper_parameters": {**ckpt["hyper_parameters"], "config": config}}


def _reference(ckpt: Checkpoint) -> ViT:
    """A model of the checkpoint's config: the parameter names, shapes and position inputs it was written for. Built
    under today's option names (format 6's renaming first), which are the only ones the schemes take."""
    return model_from_config(Config.from_dict(_config(rope2d_norm_as_preset(ckpt))))


def _format1_optimizer_order(model: ViT) -> list[str]:
    """Parameter names in the order a format-1 run's optimizer state indexes them: its two AdamW groups, the decayed
    matrices first, then norms, biases and what ``no_weight_decay()`` names."""
    skip = model.no_weight_decay()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decayed = [n for n, p in named if p.ndim > 1 and n not in skip]
    return decayed + [n for n, p in named if not (p.ndim > 1 and n not in skip)]


def interleave_rope_pairs(ckpt: Checkpoint) -> Checkpoint:
    """1 -> 2: the q and k rows of every qkv projection (and their AdamW moments) reordered.

    A logit is a dot product of rotated q and k, so permuting the head dims of both the same way changes nothing;
    moving row j + d/2 next to row j turns the rotate-half pairs into interleaved ones with the same angles, and the
    model computes exactly what it did."""
    reference = _reference(ckpt)
    with torch.no_grad():
        if reference.pos.attn_pos(reference.grid)[0].rope is None:
            return ckpt  # nothing is rotated: nothing to move
    heads, d = reference.pos.num_heads, reference.pos.head_dim
    half = torch.arange(d // 2)
    pair_order = torch.stack([half, half + d // 2], dim=-1).flatten()  # new row 2j <- old j, 2j+1 <- old j + d/2
    rows = torch.arange(3 * heads * d).view(3, heads, d)
    rows[:2] = rows[:2, :, pair_order]  # q and k only; v is never rotated
    rows = rows.flatten()

    state = {k: v[rows] if k.startswith("model.") and _QKV.search(k) else v for k, v in ckpt["state_dict"].items()}
    names = _format1_optimizer_order(reference)

    def moved(index: int, moments: dict[str, Any]) -> dict[str, Any]:
        if index >= len(names) or not _QKV.search(names[index]):
            return moments
        return {k: v[rows] if torch.is_tensor(v) and v.ndim >= 1 and v.shape[0] == len(rows) else v
                for k, v in moments.items()}  # fmt: skip

    optimizers = [{**opt, "state": {i: moved(i, m) for i, m in opt.get("state", {}).items()}}
                  for opt in ckpt.get("optimizer_states", [])]  # fmt: skip
    out = {**ckpt, "state_dict": state}
    if "optimizer_states" in ckpt:
        out["optimizer_states"] = optimizers
    return out


def add_prefix_bias_and_scale(ckpt: Checkpoint) -> Checkpoint:
    """2 -> 3: ``pos_lr_scale`` 1 (so a resumed run keeps its optimizer layout) and a class-token bias of 0 (the zero
    padding that stood in its place) wherever the model has one."""
    config = copy.deepcopy(_config(ckpt))
    config.setdefault("optim", {}).setdefault("pos_lr_scale", 1.0)
    state = dict(ckpt["state_dict"])
    for name, value in _reference(ckpt).state_dict().items():
        if name.endswith("prefix_bias") and f"model.{name}" not in state:
            state[f"model.{name}"] = torch.zeros_like(value)
    return {**_with_config(ckpt, config), "state_dict": state}


def name_decay_target_and_ramp(ckpt: Checkpoint) -> Checkpoint:
    """3 -> 4: the position decay, where a run had one, pulled towards zero; the scale had no ramp."""
    config = copy.deepcopy(_config(ckpt))
    optim = config.setdefault("optim", {})
    optim.setdefault("pos_decay_to", "zero")
    optim.setdefault("pos_lr_warmup_epochs", 0.0)
    return _with_config(ckpt, config)


def name_relbias_start(ckpt: Checkpoint) -> Checkpoint:
    """4 -> 5: a `relbias` table (alone or in a composition) started from noise alone; the config says so
    (``locality`` 0) where it named nothing, so that it builds the run's own start under today's default."""
    config = copy.deepcopy(_config(ckpt))
    model = config.setdefault("model", {})
    parts = str(model.get("pos", "")).split("+")
    if "relbias" in parts:
        kwargs = model.setdefault("pos_kwargs", {})
        (kwargs if parts == ["relbias"] else kwargs.setdefault("relbias", {})).setdefault("locality", 0.0)
    return _with_config(ckpt, config)


def rope2d_norm_as_preset(ckpt: Checkpoint) -> Checkpoint:
    """5 -> 6: a `rope2d-norm` config's own option names become rope2d's (base -> theta, normalize -> coords) and its
    augmentation options one ``pos_aug`` value; with none of them named, its default (rescale 2) is today's default
    too."""
    from .pos.base import PosAug

    config = copy.deepcopy(_config(ckpt))
    model = config.get("model", {})
    if model.get("pos") != "rope2d-norm":
        return ckpt
    kwargs = model.setdefault("pos_kwargs", {})
    for old, new in (("base", "theta"), ("normalize", "coords")):
        if old in kwargs:
            kwargs[new] = kwargs.pop(old)
    named = {k: kwargs.pop(k) for k in ("shift", "jitter", "rescale") if k in kwargs}
    if named:
        model["pos_aug"] = str(PosAug(**{"rescale": 2.0, **named}))
    return _with_config(ckpt, config)


# MIGRATIONS[f - 1] brings format f to f + 1.
MIGRATIONS: tuple[Callable[[Checkpoint], Checkpoint], ...] = (
    interleave_rope_pairs,
    add_prefix_bias_and_scale,
    name_decay_target_and_ramp,
    name_relbias_start,
    rope2d_norm_as_preset,
)
FORMAT = len(MIGRATIONS) + 1  # the format this vitpos writes


def format_of(ckpt: Checkpoint) -> int:
    return int(ckpt.get("vitpos_format", 1))


def migrate(ckpt: Checkpoint) -> Checkpoint:
    """``ckpt`` (a loaded dict of an older format) at the current FORMAT, as a new dict."""
    for step in MIGRATIONS[format_of(ckpt) - 1 :]:
        ckpt = step(ckpt)
    return {**ckpt, "vitpos_format": FORMAT}
