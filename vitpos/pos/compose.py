"""Compositions such as `rope2d+learned`: several schemes behind the one seam, with no hand-written class
per pair.

:class:`ComposedPos` holds its parts in a ModuleDict keyed by scheme name (parameter names read
``parts.learned.table``) and combines their hooks:

* ``tokens``: applied in the order of the name (``rope2d+learned``: rope2d's, then learned's);
* ``attn_pos``: merged per block: at most one part may rotate q/k, biases are summed, logit
  scales multiplied;
* ``after_block``: chained in order;
* position augmentation (``pos_aug``): given to the parts that read patch coordinates, each drawing its own;
* ``no_weight_decay``: the union of the parts' sets, with their prefixes.

Transfer methods are the product of the parts' methods, named by joining one method per part
with "+" in the same order (``extrapolate+bicubic`` for ``rope2d+learned``); the first one, the
default, joins the parts' defaults unless the composition names its own (validation can prefer
another pair for the pair than each part chose alone). Setting ``method`` splits the name and
sets each part.

Keyword arguments for one part go in a dict under its name, e.g.
``pos_kwargs={"rope2d": {"theta": 10.0}, "learned": {"init_std": 0.02}}``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn

from .base import COMMON_ARGS, AttnPos, Grid, PosScheme, parse_pos_aug


def product_methods(method_lists: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Every combination of one method per part, joined with "+"; the first joins the defaults."""
    return tuple("+".join(combo) for combo in itertools.product(*method_lists))


def merge_attn_pos(parts: Sequence[AttnPos]) -> AttnPos:
    """One block's AttnPos from its parts': at most one q/k rotation, biases summed, logit scales multiplied."""
    ropes = [a.rope for a in parts if a.rope is not None]
    rotations = [a.rotation for a in parts if a.rotation is not None]
    mixes = [a.mix for a in parts if a.mix is not None]
    if len(ropes) + len(rotations) > 1 or len(mixes) > 1:
        raise ValueError("at most one part of a composition may rotate q and k")
    biases = [a.bias for a in parts if a.bias is not None]
    bias = None if not biases else biases[0] if len(biases) == 1 else torch.stack(biases).sum(0)
    scale = 1.0
    for a in parts:
        scale *= a.logit_scale
    return AttnPos(
        rope=ropes[0] if ropes else None,
        bias=bias,
        logit_scale=scale,
        rotation=rotations[0] if rotations else None,
        mix=mixes[0] if mixes else None,
    )


class ComposedPos(PosScheme):
    """Several position schemes applied together; see the module docstring for how hooks combine.

    A composition is a subclass that fixes its parts, ``ComposedPos.of("rope2d+learned", registry)``, so that
    a registry entry is a scheme class like any other: called to build, carrying ``methods`` before building.
    """

    part_classes: ClassVar[dict[str, type[PosScheme]]] = {}

    @classmethod
    def of(cls, name: str, registry: Mapping[str, type[PosScheme]], default: str | None = None) -> type[ComposedPos]:
        """The composition class of the "+"-joined scheme ``name``, its parts looked up in ``registry`` once;
        ``default``: the method it serves a new grid with, where not the one that joins its parts' defaults."""
        names = name.split("+")
        if len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(f"a composition needs two or more distinct parts, got '{name}'")
        missing = [n for n in names if n not in registry]
        if missing:
            raise ValueError(f"composition '{name}': unknown part(s) {missing}; valid: {', '.join(registry)}")
        parts = {n: registry[n] for n in names}
        methods = product_methods([c.methods for c in parts.values()])
        if default is not None:
            if default not in methods:
                raise ValueError(f"composition '{name}': default method '{default}' is none of {', '.join(methods)}")
            methods = (default, *(m for m in methods if m != default))
        return type(f"ComposedPos[{name}]", (cls,), {"part_classes": parts, "methods": methods})

    def __init__(self, **kw):
        parts = self.part_classes
        if not parts:
            raise TypeError("build a composition from its class ComposedPos.of(name, registry)")
        common = {k: kw.pop(k) for k in COMMON_ARGS if k in kw}
        aug = parse_pos_aug(common.pop("pos_aug", None))
        if aug is not None and aug.on and all(cls.frame is None for cls in parts.values()):
            raise ValueError(f"no part of {'+'.join(parts)} reads patch coordinates: position augmentation has "
                             "nothing to act on")  # fmt: skip
        unknown = set(kw) - set(parts)
        if unknown:
            raise ValueError(
                f"composition {'+'.join(parts)}: unknown keyword(s) {sorted(unknown)}; give a part's options "
                f"as a dict under its name, one of {', '.join(parts)}"
            )
        for name, cls in parts.items():
            cls.check_options(name, kw.get(name, {}))
        super().__init__(**common)
        self.parts = nn.ModuleDict({
            name: cls(**common, **({} if cls.frame is None else {"pos_aug": aug}), **kw.get(name, {}))
            for name, cls in parts.items()
        })  # fmt: skip
        self.method = self.methods[0]  # the composition's default, which need not join its parts' defaults

    # -- the method is the parts' methods, joined -----------------------------------------
    @property
    def method(self) -> str:
        return "+".join(part.method for part in self.parts.values())

    @method.setter
    def method(self, name: str) -> None:
        PosScheme.method.fset(self, name)  # validates against the product
        for part, m in zip(self.parts.values(), name.split("+"), strict=True):
            part.method = m

    # -- hooks -------------------------------------------------------------------------------
    def tokens(self, x: Tensor, grid: Grid) -> Tensor:
        for part in self.parts.values():
            x = part.tokens(x, grid)
        return x

    def attn_pos(self, grid: Grid, device: torch.device | None = None) -> list[AttnPos]:
        per_part = [part.attn_pos(grid, device) for part in self.parts.values()]
        return [merge_attn_pos(block) for block in zip(*per_part, strict=True)]

    def after_block(self, x: Tensor, grid: Grid, index: int) -> Tensor:
        for part in self.parts.values():
            x = part.after_block(x, grid, index)
        return x

    def no_weight_decay(self) -> set[str]:
        return {f"parts.{name}.{n}" for name, part in self.parts.items() for n in part.no_weight_decay()}

    @property
    def carries_grid_state(self) -> bool:
        """A part with a grid-sized state (`rope2d+learned`'s table) makes the whole composition carry its state to
        a new grid, its rotary part then rebuilt for that grid; without one (`rope2d+peg`) it keeps its grid."""
        return any(p.carries_grid_state for p in self.parts.values())

    def state_at_grid(self, grid: Grid) -> dict[str, Tensor]:
        return {
            f"parts.{name}.{k}": v for name, part in self.parts.items() for k, v in part.state_at_grid(grid).items()
        }
