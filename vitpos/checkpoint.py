"""Reading and writing checkpoints safely.

* Reading never unpickles code: ``torch.load(weights_only=True)`` everywhere, Lightning's resume
  included. vitpos stores only tensors, numbers, strings and plain containers (the config is
  saved as a dict), so no allowlist of project types is needed.
* Writing is atomic: a checkpoint is written to a temporary file in the same folder and then
  renamed over the target, so a kill during a save never leaves a truncated ``last.ckpt``.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .config import Config, ConfigError


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
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise ConfigError(f"checkpoint {p} is truncated or corrupt ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "config" not in ckpt.get("hyper_parameters", {}):
        raise ConfigError(f"{p} is not a vitpos checkpoint (no state_dict and saved config)")
    return ckpt


def config_from_checkpoint(ckpt: dict[str, Any]) -> Config:
    return Config.from_dict(ckpt["hyper_parameters"]["config"])


def model_from_checkpoint(path: str | Path):
    """(config, ViT with the trained weights, in eval mode) from a checkpoint file."""
    from .lit import model_from_config  # local: lit imports Lightning's heavier modules

    ckpt = load_checkpoint(path)
    cfg = config_from_checkpoint(ckpt)
    model = model_from_config(cfg)
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    model.load_state_dict(state)
    return cfg, model.eval()


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO that writes to a temp file and renames it into place, and loads safely."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
