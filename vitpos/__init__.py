"""vitpos: Vision Transformers whose patch-position strategy is one configurable seam."""

from .model import ViT, create_model
from .pos import POS_REGISTRY, POS_SCHEMES
from .stems import STEMS

__version__ = "0.1.0"


def load_model(path) -> ViT:
    """The ViT stored in a vitpos checkpoint, in eval mode, read without unpickling code (one-line
    ``ConfigError`` for a missing, corrupt, unsafe or foreign file)."""
    from .checkpoint import load_model as _load  # Lightning is imported only when a checkpoint is read

    return _load(path)


def from_timm(model) -> ViT:
    """The vitpos ViT (eval mode) computing the same logits as a timm ViT / DeiT / RoPE-ViT (Eva) / BEiT instance."""
    from .interop import from_timm as _from_timm

    return _from_timm(model)


def to_timm(vit: ViT):
    """The timm model (eval mode) computing the same logits as ``vit`` (learned, none, rope, relbias schemes)."""
    from .interop import to_timm as _to_timm

    return _to_timm(vit)


def export_program(model: ViT, dynamic: bool = True, size: tuple[int, int] | None = None):
    """``torch.export`` the model with dynamic batch, height and width, checked against eager (see vitpos.export)."""
    from .export import export_program as _export  # torch.export is imported only when exporting

    return _export(model, dynamic=dynamic, size=size)


__all__ = ["POS_REGISTRY", "POS_SCHEMES", "STEMS", "ViT", "create_model", "export_program", "from_timm", "load_model",
           "to_timm", "__version__"]  # fmt: skip
