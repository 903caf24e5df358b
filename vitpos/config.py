"""Typed run configuration: defaults <- YAML file <- command-line flags.

One dataclass per concern, nested in :class:`Config`. The resolved config is saved as
YAML beside every run and as a plain dict inside every checkpoint, so a checkpoint
always says how to rebuild its model and data (:func:`model_from_config`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .model import ViT, create_model

# Size presets, timm's names and dims (ViT-Ti / S / B), plus `micro` for CPU-sized runs.
MODEL_PRESETS: dict[str, dict[str, int]] = {
    "micro": {"embed_dim": 128, "depth": 4, "num_heads": 4},
    "tiny": {"embed_dim": 192, "depth": 6, "num_heads": 3},
    "small": {"embed_dim": 384, "depth": 12, "num_heads": 6},
    "base": {"embed_dim": 768, "depth": 12, "num_heads": 12},
}


def opt(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = dataclasses.MISSING,
        choices: tuple[str, ...] | None = None, registry: str | None = None, flag: str | None = None,
        cli: bool = True, resumable: bool = False, ge: float | None = None, gt: float | None = None,
        le: float | None = None, lt: float | None = None) -> Any:  # fmt: skip
    """A config field with what the command line and the checks need, declared once.

    ``help`` and ``choices`` (a fixed tuple of names) become the flag's help text; ``registry`` names the
    registry whose names the field takes instead ("pos", "stem", "data", "strategy": vitpos.cli resolves and
    checks them, so the config itself imports no registry); ``flag`` overrides the flag name (default: the
    field name with dashes); ``cli=False`` keeps a field off the command line; ``resumable`` fields may
    differ from the run's when it is resumed (where and how it runs, not what it trains); ``ge/gt/le/lt``
    bound the value (each item of a list).
    """
    meta = {"help": help, "choices": choices, "registry": registry, "flag": flag, "cli": cli,
            "resumable": resumable, "ge": ge, "gt": gt, "le": le, "lt": lt}  # fmt: skip
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")


@dataclass
class ModelConfig:
    pos: str = opt("rope2d", "position scheme", registry="pos")
    stem: str = opt("patch", "patch: Conv2d k=s=p; conv: stacked 3x3 convs", registry="stem")
    img_size: int = opt(32, "training resolution (pixels)", gt=0)
    patch_size: int = opt(4, "patch side (pixels)", gt=0)
    in_chans: int = opt(3, "input channels (set from the data set)", cli=False, gt=0)
    num_classes: int = opt(10, "classes (set from the data set)", cli=False, gt=0)
    embed_dim: int = opt(128, "token width", gt=0)
    depth: int = opt(4, "transformer blocks", gt=0)
    num_heads: int = opt(4, "attention heads", gt=0)
    mlp_ratio: float = opt(4.0, "MLP hidden width / token width", gt=0)
    class_token: bool = opt(False, "prepend a class token")
    global_pool: str = opt("avg", "avg: mean of the patch tokens; token: the class token", choices=("avg", "token"))
    drop_path_rate: float = opt(0.0, "stochastic depth rate", flag="drop-path", ge=0, lt=1)
    layer_scale_init: float | None = opt(None, "LayerScale init value (none: off)", gt=0)
    # scheme-specific, e.g. {"theta": 100}; on the command line one --pos-kwarg KEY=VALUE each
    pos_kwargs: dict[str, Any] = opt(factory=dict, help="scheme option KEY=VALUE, e.g. theta=100 (repeatable)",
                                     flag="pos-kwarg")  # fmt: skip
    # training-only augmentation of the patch coordinates (vitpos.pos.base.PosAug); evaluation is deterministic
    pos_aug: str = opt("default", "position augmentation in training: shift=S,jitter=J,rescale=R,fuzzy[=F] (any of "
                       "them), off, or default (the scheme's own: rescale=2 for rope2d-norm, else off)")  # fmt: skip
    # the grid the position scheme trained on, where it differs from the model's: a run fine-tuned at a new size
    # from a scheme with nothing sized by the grid keeps its start's grid and serves its own by the scheme's
    # transfer method (vitpos.pretrained.apply_architecture), so that fine-tuning starts where that method left off
    pos_grid: list[int] = opt(factory=list, help="ROWS COLS: the token grid the position scheme trained on, served "
                              "at this size by its transfer method (none: the model's own grid)", gt=0)  # fmt: skip
    # options pretrained families need (vitpos.interop)
    fc_norm: bool = opt(False, "LayerNorm after pooling instead of before it (BEiT, DeiT-III with avg pool)")
    qkv_bias: str = opt(
        "qkv", "bias on q, k and v; on q and v only (BEiT, EVA); or none", choices=("qkv", "qv", "none")
    )
    norm_eps: float = opt(1e-5, "LayerNorm epsilon (timm's ViTs use 1e-6)", gt=0)
    init_from: str | None = opt(None, "start from pretrained weights: timm:NAME (downloads), a vitpos checkpoint, "
                                      "or a weights file with --init-arch")  # fmt: skip
    init_arch: str | None = opt(None, "timm architecture of the --init-from weights file")


@dataclass
class DataConfig:
    name: str = opt("shapes", "data set (shapes is embedded; the others read --data-dir)", registry="data",
                    flag="data")  # fmt: skip
    data_dir: str | None = opt(None, "where the data set's files are", resumable=True)
    download: bool = opt(False, "allow downloading the data set", resumable=True)
    batch_size: int = opt(128, "per-device batch size", gt=0)
    num_workers: int = opt(0, "data loader worker processes", ge=0, resumable=True)
    # embedded `shapes` set: sizes of the generated splits
    train_size: int = opt(8000, "shapes: generated training images", gt=0)
    val_size: int = opt(2000, "shapes: validation images", gt=0)
    test_size: int = opt(2000, "shapes: test images", gt=0)
    # augmentation (each switchable; defaults suit small data from scratch)
    hflip: bool = opt(False, "random horizontal flips (off: left/right is a label in shapes)")
    random_resized_crop: bool = opt(False, "RandomResizedCrop in training")
    rrc_scale_min: float = opt(0.35, "smallest area fraction of RandomResizedCrop", gt=0, le=1)
    randaugment: str | None = opt(None, "timm RandAugment spec, e.g. rand-m9-mstd0.5-inc1")
    mixup: float = opt(0.0, "mixup alpha (0: off)", ge=0)
    cutmix: float = opt(0.0, "cutmix alpha (0: off)", ge=0)
    random_erasing: float = opt(0.0, "random erasing probability", ge=0, le=1)
    random_crop_pad: int = opt(0, "RandomCrop with this zero padding after resizing (4 suits 28-32 px data)", ge=0)
    # real data without an official val split: images carved from train (fixed seed 0, whatever
    # the run seed) for val, capped at 10 % of train; 0 = no holdout, val is the test split
    holdout_size: int = opt(5000, "validation images carved from train where a set has no val split (0: none)",
                            ge=0)  # fmt: skip
    # a fixed subset (seed 0, whatever the run seed) of the remaining train images: small-data studies
    train_limit: int = opt(0, "train on a fixed subset of N of the train images (0: all; not for shapes)", ge=0)
    # evaluation protocol
    crop_ratio: float = opt(1.0, "eval: short side to R/crop_ratio, then centre crop R", gt=0, le=1)
    eval_resize: str = opt("crop", "eval: crop (resize + centre crop) or full (resize the whole image)",
                           choices=("crop", "full"))  # fmt: skip
    interpolation: str = opt("bicubic", "interpolation of every resize", choices=("bicubic", "bilinear", "nearest"))
    mean: list[float] | None = opt(
        None, "normalisation mean (none: the data set's own; pretrained weights bring theirs)"
    )
    std: list[float] | None = opt(None, "normalisation std (none: the data set's own)")
    verify_images: bool = opt(
        False, "decode every image of the set before training and list the bad ones", resumable=True
    )
    max_image_pixels: int | None = opt(
        None, "open images of up to N pixels (none: PIL's limit, about 89 million)", gt=0, resumable=True
    )


@dataclass
class OptimConfig:
    epochs: int = opt(10, "training epochs", gt=0)
    lr: float = opt(1e-3, "peak learning rate, for the global batch (see --lr-scaling)", gt=0)
    lr_scaling: str = opt("none", "linear: lr x global batch / 256", choices=("none", "linear"))
    # The position scheme's own parameters (tables, bias MLPs, learned frequencies, PEG's conv) train at
    # lr * pos_lr_scale. Under Adam a parameter moves at most about the summed learning rate, ~0.3 over the
    # default schedule, while a position table starting at std .02 must grow to the tokens' scale:
    # at scale 1 `learned` and `relbias` stall. docs/protocol.md compares the rule, on validation top-1, with it off
    # and with each of its parts (ramp, decay) taken away.
    pos_lr_scale: float = opt(30.0, "learning-rate factor for the position scheme's own parameters", gt=0)
    # At that rate a position parameter takes Adam's full-size steps whatever its gradient's size; a decay towards
    # the start bounds how far it moves and leaves what the loss keeps pushing about 1/decay from it
    # (vitpos.optim.AdamW). Towards the start, not zero: zero would also erase a conv's or a frequency's
    # initialisation (PEG's kernel, RoPE-Mixed's angles). Scale, decay, target and ramp were chosen together on
    # validation top-1 (docs/protocol.md).
    pos_weight_decay: float = opt(0.3, "decay of the position scheme's own parameters (see --pos-decay-to)", ge=0)
    pos_decay_to: str = opt("start", "what --pos-weight-decay pulls the position parameters towards: their "
                            "values when training starts, or zero (AdamW's decay)",
                            choices=("start", "zero"))  # fmt: skip
    # Ramped in over 5 epochs, so that the scale does not act at full size on a table still at its start. `relbias`
    # starts from a distance penalty (its `locality`), also chosen on validation (docs/protocol.md).
    pos_lr_warmup_epochs: float = opt(5.0, "epochs over which the position parameters' lr rises from lr to "
                                           "lr x --pos-lr-scale (0: the full scale from the first step)",
                                      ge=0)  # fmt: skip
    weight_decay: float = opt(0.05, "AdamW weight decay (none on norms, biases, position)", ge=0)
    warmup_epochs: float = opt(1.0, "linear warm-up (epochs)", ge=0)
    min_lr_ratio: float = opt(0.01, "final lr / peak lr of the cosine schedule", ge=0, le=1)
    label_smoothing: float = opt(0.1, "label smoothing", ge=0, lt=1)
    grad_clip: float = opt(1.0, "gradient norm clip (0: off)", ge=0)
    betas: tuple[float, float] = opt((0.9, 0.999), "AdamW betas", ge=0, lt=1)
    ema: float = opt(0.0, "keep an EMA of the weights with this decay, e.g. 0.9998; evaluated and checkpointed "
                          "(0: off)", ge=0, lt=1)  # fmt: skip


@dataclass
class TrainerConfig:
    accelerator: str = opt("cpu", "device type", choices=ACCELERATORS, resumable=True)
    devices: int = opt(1, "devices per node", gt=0)
    num_nodes: int = opt(1, "nodes", gt=0)
    strategy: str = opt("auto", "Lightning strategy", registry="strategy", resumable=True)
    precision: str = opt("32-true", "numeric precision", choices=PRECISIONS, resumable=True)
    seed: int = opt(0, "random seed")
    out: str | None = opt(None, "run folder (default: a fresh folder under runs/)", resumable=True)
    resume: bool = opt(False, "continue the run in --out from checkpoints/last.ckpt", resumable=True)
    overwrite: bool = opt(False, "move an existing run in --out aside and start anew", resumable=True)
    fast_dev_run: bool = opt(False, "one batch of train and val, no checkpoints", resumable=True)
    compile: bool = opt(False, "torch.compile the model", resumable=True)
    ckpt_every_n_steps: int | None = opt(None, "also write last.ckpt every N optimizer steps", gt=0, resumable=True)
    log_every_n_steps: int = opt(10, "log training metrics every N steps", gt=0, resumable=True)
    eval_resolutions: list[int | str] = opt(
        factory=list, help="after training, sweep these test resolutions: R or HxW", gt=0, resumable=True
    )
    train_resolutions: list[int] = opt(factory=list, help="multi-resolution training: one per batch", gt=0)


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

    def save_yaml(self, path: str | Path, header: str = "") -> None:
        d = {name: {k: list(v) if isinstance(v, tuple) else v for k, v in section.items()}
             for name, section in self.to_dict().items()}  # fmt: skip
        Path(path).write_text(header + yaml.safe_dump(d, sort_keys=False))

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
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in d.items():
        key = f"{where}.{name}".lstrip(".")
        if dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _from_dict(hints[name], value, key)
        else:
            kwargs[name] = coerce(value, hints[name], key)
    return cls(**kwargs)


# -- field types and bounds ---------------------------------------------------------------------------
def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    plural = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}
    if origin is tuple:
        return f"a list of {len(args)} {plural.get(args[0], args[0])}"
    if origin is list:
        return f"a list of {plural.get(args[0], args[0])}"
    if origin is dict:
        return "a mapping"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` as type ``tp`` (a field's annotation), or a ConfigError naming ``key``.

    Lenient only where YAML is surprising: a number written ``1e-3`` reads as a string and is
    accepted as a float; an integer is a valid float. Nothing else is converted.
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)

    def bad() -> ConfigError:
        return ConfigError(f"config key {key} must be {_describe(tp)}, got {value!r}")

    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in (a for a in args if a is not type(None)):
            try:
                return coerce(value, a, key)
            except ConfigError:
                pass
        raise bad()
    if origin in (tuple, list):
        if not isinstance(value, list | tuple) or (origin is tuple and len(value) != len(args)):
            raise bad()
        items = [coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise bad()
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad()
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad() from None
        raise bad()
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad()
    return value


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of a field: ``--`` and its metadata ``flag`` or its name with dashes."""
    return "--" + (f.metadata.get("flag") or f.name.replace("_", "-"))


def walk(cfg: Config) -> Iterator[tuple[str, Any, dataclasses.Field]]:
    """(section, section object, field) for every leaf field of ``cfg``."""
    for sf in fields(cfg):
        section = getattr(cfg, sf.name)
        for f in fields(section):
            yield sf.name, section, f


def check(cfg: Config) -> None:
    """Type, finiteness, bounds and fixed choices of every field; a ConfigError naming the flag otherwise.

    Names from a registry (``opt(registry=...)``) are checked where the command line is parsed (vitpos.cli)."""
    for name, section, f in walk(cfg):
        hints = typing.get_type_hints(type(section))
        value = coerce(getattr(section, f.name), hints[f.name], f"{name}.{f.name}")
        setattr(section, f.name, value)
        flag = flag_of(f)
        items = value if isinstance(value, list | tuple) else [value]
        for v in items:
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{flag} must be a finite number, got {v}")
            if isinstance(v, int | float) and not isinstance(v, bool):
                _check_bounds(flag, v, f.metadata)
        choices = f.metadata.get("choices")
        if choices is not None and value is not None and value not in choices:
            raise ConfigError(f"unknown {flag} '{value}'; valid: {', '.join(choices)}")
    if len(cfg.model.pos_grid) not in (0, 2):
        raise ConfigError(f"--pos-grid takes two numbers, rows and columns, got {len(cfg.model.pos_grid)}")


def _check_bounds(flag: str, v: float, meta: Any) -> None:
    ge, gt, le, lt = (meta.get(k) for k in ("ge", "gt", "le", "lt"))
    low = "" if ge is None and gt is None else (f"[{ge:g}" if ge is not None else f"({gt:g}")
    high = "" if le is None and lt is None else (f"{le:g}]" if le is not None else f"{lt:g})")
    if (ge is not None and v < ge) or (gt is not None and v <= gt) or (le is not None and v > le) or (
            lt is not None and v >= lt):  # fmt: skip
        if not high:
            kind = " integer" if isinstance(v, int) else " number"
            need = f"a positive{kind}" if gt == 0 else f">= {ge:g}" if ge is not None else f"> {gt:g}"
            raise ConfigError(f"{flag} must be {need}, got {v:g}")
        raise ConfigError(f"{flag} must be in {low or '(-inf'}, {high}, got {v:g}")


def apply_preset(model: ModelConfig, preset: str) -> None:
    """Set embed_dim / depth / num_heads from a named size preset."""
    if preset not in MODEL_PRESETS:
        raise ConfigError(f"unknown --model '{preset}'; valid: {', '.join(MODEL_PRESETS)}")
    for k, v in MODEL_PRESETS[preset].items():
        setattr(model, k, v)


def model_from_config(cfg: Config) -> ViT:
    """The ViT a config describes (the single place config fields become model kwargs)."""
    m = cfg.model
    return create_model(m.pos, stem=m.stem, img_size=m.img_size, patch_size=m.patch_size, num_classes=m.num_classes,
                        embed_dim=m.embed_dim, depth=m.depth, num_heads=m.num_heads, mlp_ratio=m.mlp_ratio,
                        in_chans=m.in_chans, class_token=m.class_token, global_pool=m.global_pool,
                        drop_path_rate=m.drop_path_rate, layer_scale_init=m.layer_scale_init,
                        pos_kwargs=m.pos_kwargs, pos_aug=m.pos_aug, fc_norm=m.fc_norm, qkv_bias=m.qkv_bias,
                        norm_eps=m.norm_eps, pos_grid=tuple(m.pos_grid) or None)  # fmt: skip
