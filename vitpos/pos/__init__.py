"""The registry of position schemes: name -> class. Adding a scheme is one file and one line here."""

from __future__ import annotations

from .base import AttnPos, Grid, PosScheme
from .learned import LearnedPos
from .none import NoPos
from .relbias import RelBiasPos
from .rope2d import Rope2dPos
from .sincos2d import SinCos2dPos

POS_REGISTRY: dict[str, type[PosScheme]] = {
    "learned": LearnedPos,
    "sincos2d": SinCos2dPos,
    "rope2d": Rope2dPos,
    "relbias": RelBiasPos,
    "none": NoPos,
}
POS_SCHEMES: tuple[str, ...] = tuple(POS_REGISTRY)


def build_pos(name: str, **kwargs) -> PosScheme:
    """Build the scheme ``name``; an unknown name raises ValueError listing the valid ones."""
    if name not in POS_REGISTRY:
        raise ValueError(f"unknown position scheme '{name}'; valid: {', '.join(POS_SCHEMES)}")
    return POS_REGISTRY[name](**kwargs)


__all__ = ["POS_REGISTRY", "POS_SCHEMES", "AttnPos", "Grid", "PosScheme", "build_pos"]
