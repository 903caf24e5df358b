"""Reading and writing checkpoints safely.

* Reading never unpickles code: ``torch.load(weights_only=True)`` everywhere, Lightning's resume
  included. vitpos stores only tensors, numbers, strings and plain containers (the config is
  saved as a dict), so no allowlist of project types is needed.
* Writing is atomic: a checkpoint is written to a temporary file in the same folder and then
  renamed over the target, so a kill during a save never leaves a truncated ``last.ckpt``. The file
  gets the permissions of every other file the run writes (0666 less the umask).
* Old checkpoints keep working: each carries ``vitpos_format``, and one written by an older
  vitpos is upgraded in memory when read (the file itself is never rewritten).
"""

from __future__ import annotations

import os
import pickle
import re
import secrets
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch import Tensor

from .config import Config
from .errors import ConfigError
from .model import ViT, model_from_config
from .optim import param_groups

# 1 (no "vitpos_format" key): RoPE pairs were (x[j], x[j + d/2]) ("rotate-half").
# 2: RoPE pairs are (x[2j], x[2j+1]) (interleaved, one complex multiply).
# 3: optim.pos_lr_scale exists (absent before: 1); bias schemes with a class token learn its bias
#    (``prefix_bias``; before: 0).
# 4: optim.pos_decay_to and optim.pos_lr_warmup_epochs exist (absent before: zero, AdamW's decay, and 0).
# 5: `relbias` tables start from a distance penalty unless told otherwise (its ``locality`` defaults to 1; before: 0,
#    noise alone), and the ramp defaults to 5 epochs (format 4 configs already name it).
# 6: `rope2d-norm` is a preset of `rope2d`: its options base and normalize are rope2d's theta and coords, and its
#    augmentation (shift, jitter, rescale) is model.pos_aug, shared by every scheme.
FORMAT = 6


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a vitpos checkpoint dict without running code; a bad file raises ConfigError (one line)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"checkpoint not found: {p}")
    if p.is_dir():
        raise ConfigError(f"checkpoint path is a folder, not a file: {p}")
    if p.stat().st_size == 0:
        raise ConfigError(f"checkpoint is empty (0 bytes): {p}")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)", str(e))
        if found:  # the file asks to import and call something: never done
            raise ConfigError(f"refused to load {p}: it would run code ({found.group(1)}), not plain data") from None
        raise ConfigError(f"checkpoint {p} is truncated or corrupt (not a torch checkpoint)") from None
    except Exception as e:  # noqa: BLE001 - any other failure of the reader means the bytes are not a checkpoint
        # (a text file, for one, trips the pickle reader with a KeyError or an IndexError)
        raise ConfigError(f"checkpoint {p} is truncated or corrupt ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "config" not in ckpt.get("hyper_parameters", {}):
        raise ConfigError(f"{p} is not a vitpos checkpoint (no state_dict and saved config)")
    return upgrade_checkpoint(ckpt, p)


def upgrade_checkpoint(ckpt: dict[str, Any], path: str | Path = "checkpoint") -> dict[str, Any]:
    """Bring ``ckpt`` (a loaded dict) to the current FORMAT in place; a newer format is refused in one line."""
    fmt = int(ckpt.get("vitpos_format", 1))
    if fmt > FORMAT:
        raise ConfigError(f"{path} was written by a newer vitpos (checkpoint format {fmt}, this one reads <= {FORMAT})")
    cfg = ckpt["hyper_parameters"]["config"]
    if fmt < 6:  # first: the reference model below is built from today's option names
        rope2d_norm_as_preset(cfg)
    if fmt < 3:
        # A freshly built model of the saved config gives the current parameter names, shapes and optimizer layout.
        reference = model_from_config(config_from_checkpoint(ckpt))
        if fmt < 2:
            interleave_rope_pairs(ckpt["state_dict"], ckpt.get("optimizer_states", []), reference)
        add_format3_fields(ckpt["state_dict"], cfg, reference)
    if fmt < 4:  # the position decay, where a run had one, pulled towards zero; the scale had no ramp
        optim = cfg.setdefault("optim", {})
        optim.setdefault("pos_decay_to", "zero")
        optim.setdefault("pos_lr_warmup_epochs", 0.0)
    if fmt < 5:
        name_relbias_start(cfg)
    ckpt["vitpos_format"] = FORMAT
    return ckpt


def name_relbias_start(cfg: dict[str, Any]) -> None:
    """Format 4 -> 5: a `relbias` table (alone or in a composition) then started from noise alone; the saved config
    says so (``locality`` 0) where it named nothing, so that it builds the run's own start under today's default."""
    model = cfg.setdefault("model", {})
    parts = str(model.get("pos", "")).split("+")
    if "relbias" not in parts:
        return
    kwargs = model.setdefault("pos_kwargs", {})
    (kwargs if parts == ["relbias"] else kwargs.setdefault("relbias", {})).setdefault("locality", 0.0)


def rope2d_norm_as_preset(cfg: dict[str, Any]) -> None:
    """Format 5 -> 6: a `rope2d-norm` config's own option names become rope2d's (base -> theta, normalize ->
    coords) and its augmentation options one ``pos_aug`` value; with none of them named, its default (rescale 2)
    is today's default too."""
    model = cfg.get("model", {})
    if model.get("pos") != "rope2d-norm":
        return
    kwargs = model.setdefault("pos_kwargs", {})
    for old, new in (("base", "theta"), ("normalize", "coords")):
        if old in kwargs:
            kwargs[new] = kwargs.pop(old)
    named = {k: kwargs.pop(k) for k in ("shift", "jitter", "rescale") if k in kwargs}
    if named:
        from .pos.base import PosAug

        model["pos_aug"] = str(PosAug(**{"rescale": 2.0, **named}))


def interleave_rope_pairs(state: dict[str, Tensor], optimizer_states: list[dict[str, Any]], reference: ViT) -> None:
    """Format 1 -> 2: reorder the q and k rows of every qkv projection in ``state`` (and their AdamW moments).

    A logit is a dot product of rotated q and k, so permuting the head dims of both the same way
    changes nothing; moving row j + d/2 next to row j turns the old rotate-half pairs into
    interleaved ones with the same angles, and the model computes exactly what it did.
    ``reference`` (a model of the same config) says whether anything is rotated and how the optimizer
    groups are laid out.
    """
    with torch.no_grad():
        if reference.pos.attn_pos(reference.grid)[0].rope is None:
            return  # nothing is rotated: nothing to move
    heads, d = reference.pos.num_heads, reference.pos.head_dim
    half = torch.arange(d // 2)
    pair_order = torch.stack([half, half + d // 2], dim=-1).flatten()  # new row 2j <- old j, 2j+1 <- old j + d/2
    rows = torch.arange(3 * heads * d).view(3, heads, d)
    rows[:2] = rows[:2, :, pair_order]  # q and k only; v is never rotated
    rows = rows.flatten()
    qkv = re.compile(r"blocks\.\d+\.attn\.qkv\.(weight|bias)$")

    for name in [n for n in state if n.startswith("model.") and qkv.search(n)]:
        state[name] = state[name][rows]
    # Lightning's optimizer state is indexed by parameter position across the groups vitpos builds
    # (format 1 had no pos_lr_scale, so the plain layout).
    name_of = {id(p): n for n, p in reference.named_parameters()}
    names = [name_of[id(p)] for g in param_groups(reference, 0.0, 1.0) for p in g["params"]]
    for opt in optimizer_states:
        for index, moments in opt.get("state", {}).items():
            if index < len(names) and qkv.search(names[index]):
                for key, value in moments.items():
                    if torch.is_tensor(value) and value.ndim >= 1 and value.shape[0] == len(rows):
                        moments[key] = value[rows]


def add_format3_fields(state: dict[str, Tensor], config: dict[str, Any], reference: ViT) -> None:
    """Format 2 -> 3: the settings and parameters that did not exist take the values that reproduce the old
    run: ``pos_lr_scale`` 1 in ``config`` (so a resumed run keeps its optimizer layout) and, in ``state``, a
    class-token bias of 0 (the zero padding that stood in its place) wherever ``reference`` has one."""
    config.setdefault("optim", {}).setdefault("pos_lr_scale", 1.0)
    for name, value in reference.state_dict().items():
        if name.endswith("prefix_bias") and f"model.{name}" not in state:
            state[f"model.{name}"] = torch.zeros_like(value)


def config_from_checkpoint(ckpt: dict[str, Any]) -> Config:
    """The saved run config of a loaded checkpoint dict."""
    return Config.from_dict(ckpt["hyper_parameters"]["config"])


EMA_PREFIX = "ema.module."  # where LitViT keeps the moving average of the weights (``--ema``)


def model_from_checkpoint(path: str | Path, weights: str = "auto") -> tuple[Config, ViT]:
    """(config, ViT with the trained weights, in eval mode) from a checkpoint file.

    ``weights``: "ema" (the moving average, if the run kept one), "raw" (the optimised weights),
    or "auto": the EMA weights when present, since those are what the run evaluated.
    """
    if weights not in ("auto", "ema", "raw"):
        raise ConfigError(f"weights must be auto, ema or raw, got '{weights}'")
    ckpt = load_checkpoint(path)
    cfg = config_from_checkpoint(ckpt)
    model = model_from_config(cfg)
    has_ema = any(k.startswith(EMA_PREFIX) for k in ckpt["state_dict"])
    if weights == "ema" and not has_ema:
        raise ConfigError(f"{path} holds no EMA weights (the run was trained without --ema)")
    prefix = EMA_PREFIX if has_ema and weights != "raw" else "model."
    state = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    model.load_state_dict(state)
    return cfg, model.eval()


def load_model(path: str | Path) -> ViT:
    """The ViT stored in a vitpos checkpoint, in eval mode; read without unpickling code."""
    return model_from_checkpoint(path)[1]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO that writes to a temp file and renames it into place, and loads safely."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not tempfile.mkstemp: its files are 0600; os.open with 0666 lets the umask decide, as for every other file.
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict[str, Any]:
        return load_checkpoint(path)
