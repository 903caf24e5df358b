"""vitpos: Vision Transformers whose patch-position strategy is one configurable seam."""

from .model import ViT, create_model
from .pos import POS_REGISTRY, POS_SCHEMES
from .stems import STEMS

__version__ = "0.1.0"
__all__ = ["POS_REGISTRY", "POS_SCHEMES", "STEMS", "ViT", "create_model", "__version__"]
