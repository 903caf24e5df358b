"""Reading and writing checkpoints safely.

* Reading never unpickles code: ``torch.load(weights_only=True)`` everywhere, Lightning's resume
  included. vitpos stores only tensors, numbers, strings and plain containers (the config is
  saved as a dict), so no allowlist of project types is needed.
* Writing is atomic: a checkpoint is written to a temporary file in the same folder and then
  renamed over the target, so a kill during a save never leaves a truncated ``last.ckpt``. The file
  gets the permissions of every other file the run writes (0666 less the umask).
* Old checkpoints keep working: each carries ``vitpos_format``, and one written by an older
  vitpos is brought to the current format in memory when read (:mod:`vitpos.migrations`; the
  file itself is never rewritten).
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

from .config import Config, model_from_config
from .errors import ConfigError
from .migrations import FORMAT, format_of, migrate
from .model import ViT


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
    fmt = format_of(ckpt)
    if fmt > FORMAT:
        raise ConfigError(f"{p} was written by a newer vitpos (checkpoint format {fmt}, this one reads <= {FORMAT})")
    return migrate(ckpt) if fmt < FORMAT else ckpt


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
    """Lightning checkpoint IO that writes to a temp file and renames it into place, and loads safely.

    ``preloaded`` maps a path to the checkpoint already read from it (a resumed run reads its ``last.ckpt`` once,
    for its config): Lightning's restore gets that dict instead of reading the file again."""

    def __init__(self, preloaded: dict[str | Path, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.preloaded = {os.path.abspath(p): ckpt for p, ckpt in (preloaded or {}).items()}

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
        except OSError as e:  # a full disk, a quota, a file-size limit: named after the checkpoint, not the temp file
            Path(tmp).unlink(missing_ok=True)
            raise OSError(e.errno, e.strerror, str(path)) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict[str, Any]:
        ckpt = self.preloaded.pop(os.path.abspath(path), None)
        return ckpt if ckpt is not None else load_checkpoint(path)
