"""Starting from pretrained weights: ``--init-from SPEC`` to a ViT, then carried to a run's own size and classes.

SPEC is one of

* ``timm:NAME``: timm's pretrained weights for the architecture NAME, fetched by timm (the only way
  vitpos downloads weights, and only when this spec is given);
* a weights file, ``.safetensors`` or ``.pth`` / ``.pt`` / ``.bin`` (read with ``weights_only=True``),
  together with ``arch`` (``--init-arch NAME``), the timm architecture it belongs to; timm's own
  checkpoint filter for that family converts original layouts (naver's RoPE-ViT, Microsoft's BEiT);
* a vitpos checkpoint.

timm models become vitpos ViTs through :func:`vitpos.interop.from_timm`. :func:`transfer_weights` then loads the
weights into a ViT built for the run: every scheme carries its parameters to the new grid by its own
transfer method (:meth:`PosScheme.state_at_grid`), and a head for another number of classes is
re-initialised.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .compat.timm import checkpoint_filter
from .config import ModelConfig, flag_of
from .errors import ConfigError
from .model import ViT

WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
# ModelConfig fields that describe the architecture (taken from the weights); img_size, num_classes,
# drop_path_rate and the init fields stay the run's own.
ARCH_FIELDS = ("pos", "stem", "patch_size", "in_chans", "embed_dim", "depth", "num_heads", "mlp_ratio", "class_token",
               "global_pool", "layer_scale_init", "pos_kwargs", "fc_norm", "qkv_bias", "norm_eps")  # fmt: skip


@dataclass
class Pretrained:
    """A pretrained ViT at its own size, what it is, and how its images were preprocessed."""

    spec: str
    model: ViT
    arch: dict[str, Any]  # ModelConfig values of ARCH_FIELDS
    img_size: int  # the (height of the) size it was trained at
    data_config: dict[str, Any] | None = None  # timm's: mean, std, crop_pct, interpolation, input_size


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """A state dict from a weights file, never unpickling code; a bad file is a one-line ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"weights file not found: {p}")
    if p.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(p))
        except (SafetensorError, OSError, ValueError) as e:
            raise ConfigError(f"{p} is not a readable safetensors file ({str(e).splitlines()[0]})") from None
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)", str(e))
        if found:
            raise ConfigError(f"refused to load {p}: it would run code ({found.group(1)}), not plain data") from None
        raise ConfigError(f"{p} is truncated or corrupt (not a torch weights file)") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise ConfigError(f"{p} is truncated or corrupt ({type(e).__name__})") from None
    for key in ("model", "state_dict", "module", "model_ema"):  # common wrappers of a state dict
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise ConfigError(f"{p} holds no state dict of tensors")
    return state


def _timm_model(name: str, weights: str | Path | None, download: bool):
    import timm

    if not timm.is_model(name):
        raise ConfigError(f"unknown timm architecture '{name}' (see timm.list_models())")
    if download:
        try:
            return timm.create_model(name, pretrained=True)
        except Exception as e:  # offline, no weights for NAME, a hub error: whatever it is, one line
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(f"timm could not fetch pretrained weights for '{name}': {first}") from None
    state = read_weights(weights)
    head = state.get("head.weight")
    kw = {"num_classes": head.shape[0]} if head is not None and head.ndim == 2 else {}  # fine-tuned on other classes
    model = timm.create_model(name, pretrained=False, **kw)
    filter_fn = checkpoint_filter(model)
    if filter_fn is not None:  # timm's conversion of the family's original checkpoint layouts
        try:
            state = filter_fn(state, model)
        except (KeyError, RuntimeError, ValueError, AssertionError) as e:
            raise ConfigError(f"{weights} does not fit timm's '{name}' ({type(e).__name__}: {e})") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise ConfigError(f"{weights} does not fit timm's '{name}': {first}") from None
    return model


def from_timm_model(spec: str, model) -> Pretrained:
    """A :class:`Pretrained` from a timm model instance (its weights as they are)."""
    from timm.data import resolve_data_config

    from .interop import timm_to_vitpos

    kwargs, state = timm_to_vitpos(model)
    vit = ViT(**kwargs)
    vit.load_state_dict(state)
    img = kwargs["img_size"]
    arch = {k: kwargs.get(k, getattr(ModelConfig, k, None)) for k in ARCH_FIELDS}
    arch["pos_kwargs"] = dict(kwargs.get("pos_kwargs") or {})
    data_config = resolve_data_config({}, model=model)
    return Pretrained(spec, vit.eval(), arch, img if isinstance(img, int) else img[0], data_config)


def load_pretrained(spec: str, arch: str | None = None) -> Pretrained:
    """Resolve an ``--init-from`` SPEC (see the module docstring); ``arch`` names a weights file's timm model."""
    if spec.startswith("timm:"):
        name = spec.removeprefix("timm:")
        if arch is not None and arch != name:
            raise ConfigError(f"--init-arch {arch} contradicts --init-from {spec}")
        return from_timm_model(spec, _timm_model(name, None, download=True))
    path = Path(spec)
    if arch is not None:
        if path.suffix not in WEIGHT_SUFFIXES:
            raise ConfigError(f"--init-arch reads a weights file ({', '.join(WEIGHT_SUFFIXES)}), got {path}")
        return from_timm_model(spec, _timm_model(arch, path, download=False))
    if path.suffix in WEIGHT_SUFFIXES:
        raise ConfigError(f"{path} is a weights file: pass --init-arch NAME, the timm architecture it belongs to")
    from .checkpoint import model_from_checkpoint

    cfg, model = model_from_checkpoint(path)
    arch_values = {k: getattr(cfg.model, k) for k in ARCH_FIELDS}
    return Pretrained(spec, model, arch_values, cfg.model.img_size)


def apply_architecture(model_cfg: ModelConfig, pre: Pretrained, asked: set[str] | None = None) -> None:
    """Set the architecture fields of ``model_cfg`` to the pretrained model's; its img_size must fit the patch.

    A field asked for (named in ``asked``, the fields a flag, a preset or the YAML set; default: those away from
    their defaults) that the weights contradict is refused, naming both values: the weights decide the architecture,
    and a flag must not pass silently unheeded. A scheme with nothing sized by the grid and several methods
    (``PosScheme.serves_by_method``) keeps the weights' training grid (``pos_grid``, unless one is asked for), so that
    the run starts where its default method serves the new grid."""
    known = {f.name: f for f in fields(ModelConfig)}
    default = ModelConfig()
    arch = [(k, getattr(model_cfg, k), v) for k, v in pre.arch.items() if k in known]
    chosen = (lambda k, mine: k in asked) if asked is not None else (lambda k, mine: mine != getattr(default, k))
    clashes = [f"{flag_of(known[k])} {_shown(mine)} (the weights: {_shown(theirs)})" for k, mine, theirs in arch
               if chosen(k, mine) and mine != theirs]  # fmt: skip
    if clashes:
        raise ConfigError(
            f"{pre.spec} fixes the architecture, which {'; '.join(clashes)} contradict(s); leave those flags out "
            "(the weights' values are taken) or train from scratch"
        )
    for k, _, v in arch:
        setattr(model_cfg, k, v)
    if model_cfg.img_size % model_cfg.patch_size:
        raise ConfigError(
            f"--img-size {model_cfg.img_size} is not a multiple of the patch size {model_cfg.patch_size} of {pre.spec}"
        )
    grid = [model_cfg.img_size // model_cfg.patch_size] * 2
    if pre.model.pos.serves_by_method and not model_cfg.pos_grid:  # fine-tuning starts where the method left off
        trained = list(pre.model.pos.train_grid)
        model_cfg.pos_grid = trained if trained != grid else []


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def transfer_weights(source: ViT, target: ViT) -> list[str]:
    """Load ``source``'s weights into ``target`` (the same architecture at its own grid and classes).

    The scheme carries its parameters to ``target``'s grid by ``source.pos.method`` (or, kept at its training grid
    by ``target``'s ``pos_grid``, serves the new grid by its method in every forward); the head is left as
    ``target`` initialised it when the class counts differ. Returns one note per change, for the log.
    """
    with torch.no_grad():
        state = {k: v for k, v in source.state_dict().items() if not k.startswith("pos.")}
        state.update({f"pos.{k}": v for k, v in source.pos.state_at_grid(target.grid).items()})
    notes = []
    if target.pos.train_grid != target.grid:
        t, g = target.pos.train_grid, target.grid
        notes.append(f"position kept at its {t[0]}x{t[1]} training grid, {g[0]}x{g[1]} served by '{target.pos.method}'")
    elif source.grid != target.grid:
        notes.append(
            f"position carried from grid {source.grid[0]}x{source.grid[1]} to {target.grid[0]}x{target.grid[1]} "
            f"by '{source.pos.method}'"
        )
    n_src, n_tgt = source.head.out_features, target.head.out_features
    if n_src != n_tgt:
        state = {k: v for k, v in state.items() if not k.startswith("head.")}
        notes.append(f"head re-initialised: {n_src} classes in the weights, {n_tgt} in the data")
    try:
        missing, unexpected = target.load_state_dict(state, strict=False)
    except RuntimeError as e:
        lines = [s.strip() for s in str(e).splitlines() if s.strip()]
        first = lines[1] if len(lines) > 1 else lines[0]
        raise ConfigError(f"the pretrained weights do not fit the model: {first}") from None
    missing = [k for k in missing if not (n_src != n_tgt and k.startswith("head."))]
    if missing or unexpected:
        raise ConfigError(f"the pretrained weights do not fit the model: missing {missing}, unexpected {unexpected}")
    return notes


__all__ = ["ARCH_FIELDS", "Pretrained", "apply_architecture", "transfer_weights", "load_pretrained", "read_weights"]
