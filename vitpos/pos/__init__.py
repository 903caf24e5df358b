"""The registry of position schemes: name -> class. Adding a scheme is one file and one line here.

A name "a+b" is a composition of registered schemes (see compose.py): its entry is the
:class:`ComposedPos` subclass ``ComposedPos.of("a+b", ...)``.
"""

from __future__ import annotations

from .alibi2d import Alibi2dPos
from .base import AttnPos, Grid, PosAug, PosScheme
from .compose import ComposedPos
from .cpb import CpbPos
from .fire import FirePos
from .learned import LearnedPos
from .liere import LiePos
from .lookhere import LookHerePos
from .none import NoPos
from .pape import PaPEPos
from .peg import PegPos
from .relbias import RelBiasPos
from .rope2d import Rope2dNormPos, Rope2dPos
from .rope2d_mixed import Rope2dMixedPos
from .sincos2d import SinCos2dPos
from .string import StringPos

_SINGLE: dict[str, type[PosScheme]] = {
    "learned": LearnedPos,
    "sincos2d": SinCos2dPos,
    "rope2d": Rope2dPos,
    "relbias": RelBiasPos,
    "none": NoPos,
    "rope2d-mixed": Rope2dMixedPos,
    "cpb": CpbPos,
    "peg": PegPos,
    "alibi2d": Alibi2dPos,
    "lookhere": LookHerePos,
    "rope2d-norm": Rope2dNormPos,
    "liere": LiePos,
    "fire": FirePos,
    "string": StringPos,
    "pape": PaPEPos,
}
# each composition -> its default transfer method where validation chose another than the one joining its parts'
# defaults (docs/protocol.md; None: the parts' defaults)
_COMPOSED: dict[str, str | None] = {
    "rope2d+learned": "yarn+bicubic",
    "rope2d+peg": None,
    "relbias+peg": None,
    "rope2d-mixed+learned": None,
    "alibi2d+peg": "scaled+conv",
}
POS_REGISTRY: dict[str, type[PosScheme]] = {
    **_SINGLE,
    **{name: ComposedPos.of(name, _SINGLE, default) for name, default in _COMPOSED.items()},
}
POS_SCHEMES: tuple[str, ...] = tuple(POS_REGISTRY)


def build_pos(name: str, **kwargs) -> PosScheme:
    """Build the scheme ``name``; an unknown name raises ValueError listing the valid ones."""
    if name not in POS_REGISTRY:
        raise ValueError(f"unknown position scheme '{name}'; valid: {', '.join(POS_SCHEMES)}")
    cls = POS_REGISTRY[name]
    if not issubclass(cls, ComposedPos):  # a composition checks each part's options itself
        cls.check_options(name, kwargs)
    return cls(**kwargs)


__all__ = ["POS_REGISTRY", "POS_SCHEMES", "AttnPos", "ComposedPos", "Grid", "PosAug", "PosScheme", "build_pos"]
