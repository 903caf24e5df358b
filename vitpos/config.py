"""Typed run configuration: defaults <- YAML file <- command-line flags.

One dataclass per concern, nested in :class:`Config`. The resolved config is saved as
YAML beside every run and as a plain dict inside every checkpoint, so a checkpoint
always says how to rebuild its model and data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

# Size presets, timm's names and dims (ViT-Ti / S / B), plus `micro` for CPU-sized runs.
MODEL_PRESETS: dict[str, dict[str, int]] = {
    "micro": {"embed_dim": 128, "depth": 4, "num_heads": 4},
    "tiny": {"embed_dim": 192, "depth": 6, "num_heads": 3},
    "small": {"embed_dim": 384, "depth": 12, "num_heads": 6},
    "base": {"embed_dim": 768, "depth": 12, "num_heads": 12},
}


class ConfigError(ValueError):
    """A user-facing configuration problem; its message is printed as one line."""


@dataclass
class ModelConfig:
    pos: str = "rope2d"
    stem: str = "patch"
    img_size: int = 32
    patch_size: int = 4
    in_chans: int = 3
    num_classes: int = 10
    embed_dim: int = 128
    depth: int = 4
    num_heads: int = 4
    mlp_ratio: float = 4.0
    class_token: bool = False
    global_pool: str = "avg"  # "avg" or "token"
    drop_path_rate: float = 0.0
    layer_scale_init: float | None = None
    pos_kwargs: dict[str, Any] = field(default_factory=dict)  # scheme-specific, e.g. {"theta": 100}
    # options pretrained families need (vitpos.interop): the final norm after pooling, qkv bias on
    # "qkv" / "qv" (BEiT) / "none", LayerNorm epsilon (timm's ViTs use 1e-6)
    fc_norm: bool = False
    qkv_bias: str = "qkv"
    norm_eps: float = 1e-5
    # start from pretrained weights: "timm:NAME", a vitpos checkpoint, or a weights file with init_arch
    init_from: str | None = None
    init_arch: str | None = None


@dataclass
class DataConfig:
    name: str = "shapes"
    data_dir: str | None = None
    download: bool = False
    batch_size: int = 128
    num_workers: int = 0
    # embedded `shapes` set: sizes of the generated splits
    train_size: int = 8000
    val_size: int = 2000
    test_size: int = 2000
    # augmentation (each switchable; defaults suit small data from scratch)
    hflip: bool = False  # off by default: left/right is a label in `shapes`
    random_resized_crop: bool = False
    rrc_scale_min: float = 0.35
    randaugment: str | None = None  # timm spec, e.g. "rand-m9-mstd0.5-inc1"
    mixup: float = 0.0
    cutmix: float = 0.0
    random_erasing: float = 0.0
    random_crop_pad: int = 0  # RandomCrop with this zero padding after resizing (4 suits 28-32 px data)
    # real data without an official val split: images carved from train (fixed seed 0, whatever
    # the run seed) for val, capped at 10 % of train; 0 = no holdout, val is the test split
    holdout_size: int = 5000
    # evaluation protocol
    crop_ratio: float = 1.0
    eval_resize: str = "crop"  # "crop": short side to R/crop_ratio then centre crop; "full": resize whole image
    interpolation: str = "bicubic"  # of every resize: "bicubic", "bilinear" or "nearest"
    mean: list[float] | None = None  # normalisation; None: the data set's own (pretrained weights bring theirs)
    std: list[float] | None = None


@dataclass
class OptimConfig:
    epochs: int = 10
    lr: float = 1e-3  # for the global batch below; see `lr_scaling`
    lr_scaling: str = "none"  # "none" or "linear": lr * global_batch / 256
    # The position scheme's own parameters (tables, bias MLPs, learned frequencies, PEG's conv) train at
    # lr * pos_lr_scale. Under Adam a parameter moves at most about the summed learning rate, ~0.3 over the
    # default schedule, while a position table starting at std .02 must grow to the tokens' scale:
    # at scale 1 `learned` and `relbias` stall (docs/results.md has the ablation).
    pos_lr_scale: float = 30.0
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    min_lr_ratio: float = 0.01
    label_smoothing: float = 0.1
    grad_clip: float = 1.0
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class TrainerConfig:
    accelerator: str = "cpu"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    seed: int = 0
    out: str | None = None
    resume: bool = False
    overwrite: bool = False
    fast_dev_run: bool = False
    compile: bool = False
    ckpt_every_n_steps: int | None = None
    log_every_n_steps: int = 10
    eval_resolutions: list[int] = field(default_factory=list)
    train_resolutions: list[int] = field(default_factory=list)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        """Build from a nested dict; unknown keys are an error (a typo must not pass silently)."""
        return _from_dict(cls, d or {}, "")

    def save_yaml(self, path: str | Path) -> None:
        d = self.to_dict()
        d["optim"]["betas"] = list(d["optim"]["betas"])
        Path(path).write_text(yaml.safe_dump(d, sort_keys=False))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Config:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            d = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {p} is not valid YAML: {str(e).splitlines()[0]}") from None
        if d is not None and not isinstance(d, dict):
            raise ConfigError(f"config file {p} must hold a mapping of sections (model, data, optim, trainer)")
        return cls.from_dict(d or {})


def _from_dict(cls: type, d: dict[str, Any], where: str) -> Any:
    if not isinstance(d, dict):
        raise ConfigError(f"config section '{where or 'root'}' must be a mapping, got {type(d).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(d) - set(known)
    if unknown:
        raise ConfigError(f"unknown config key(s) {sorted(unknown)} in '{where or 'root'}'; valid: {sorted(known)}")
    kwargs = {}
    for name, value in d.items():
        f = known[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            kwargs[name] = _from_dict(type(default), value, f"{where}.{name}".lstrip("."))
        elif name == "betas" and value is not None:
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def apply_preset(model: ModelConfig, preset: str) -> None:
    """Set embed_dim / depth / num_heads from a named size preset."""
    if preset not in MODEL_PRESETS:
        raise ConfigError(f"unknown --model '{preset}'; valid: {', '.join(MODEL_PRESETS)}")
    for k, v in MODEL_PRESETS[preset].items():
        setattr(model, k, v)
