"""Command line <-> Config: dataclass defaults, then ``--config`` YAML, then explicit flags.

Only flags the user actually typed override the YAML (argparse defaults are suppressed),
so ``--config configs/cifar10.yaml --epochs 5`` changes the epochs and nothing else.
"""

from __future__ import annotations

import argparse
from typing import Any

from .config import Config, ConfigError, apply_preset

# flag -> (config section, field). The flag's type comes from argparse below.
FLAG_FIELDS: dict[str, tuple[str, str]] = {
    "pos": ("model", "pos"),
    "stem": ("model", "stem"),
    "img_size": ("model", "img_size"),
    "patch_size": ("model", "patch_size"),
    "embed_dim": ("model", "embed_dim"),
    "depth": ("model", "depth"),
    "num_heads": ("model", "num_heads"),
    "mlp_ratio": ("model", "mlp_ratio"),
    "class_token": ("model", "class_token"),
    "drop_path": ("model", "drop_path_rate"),
    "data": ("data", "name"),
    "data_dir": ("data", "data_dir"),
    "download": ("data", "download"),
    "batch_size": ("data", "batch_size"),
    "num_workers": ("data", "num_workers"),
    "train_size": ("data", "train_size"),
    "val_size": ("data", "val_size"),
    "test_size": ("data", "test_size"),
    "hflip": ("data", "hflip"),
    "randaugment": ("data", "randaugment"),
    "mixup": ("data", "mixup"),
    "cutmix": ("data", "cutmix"),
    "random_erasing": ("data", "random_erasing"),
    "epochs": ("optim", "epochs"),
    "lr": ("optim", "lr"),
    "lr_scaling": ("optim", "lr_scaling"),
    "weight_decay": ("optim", "weight_decay"),
    "warmup_epochs": ("optim", "warmup_epochs"),
    "label_smoothing": ("optim", "label_smoothing"),
    "accelerator": ("trainer", "accelerator"),
    "devices": ("trainer", "devices"),
    "num_nodes": ("trainer", "num_nodes"),
    "strategy": ("trainer", "strategy"),
    "precision": ("trainer", "precision"),
    "seed": ("trainer", "seed"),
    "out": ("trainer", "out"),
    "resume": ("trainer", "resume"),
    "overwrite": ("trainer", "overwrite"),
    "fast_dev_run": ("trainer", "fast_dev_run"),
    "compile": ("trainer", "compile"),
    "ckpt_every_n_steps": ("trainer", "ckpt_every_n_steps"),
    "eval_resolutions": ("trainer", "eval_resolutions"),
    "train_resolutions": ("trainer", "train_resolutions"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, as for every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="train.py",
        description="Train a ViT with a chosen patch-position scheme (defaults: the embedded `shapes` set, CPU).",
        argument_default=argparse.SUPPRESS,
    )
    a = p.add_argument
    a("--config", help="YAML file with model/data/optim/trainer sections (flags override it)")
    g = p.add_argument_group("model")
    g.add_argument("--pos", help="position scheme (see vitpos.POS_SCHEMES)")
    g.add_argument("--stem", help="patch | conv")
    g.add_argument("--model", help="size preset: micro | tiny | small | base (explicit dims override)")
    g.add_argument("--img-size", type=int, help="training resolution (pixels)")
    g.add_argument("--patch-size", type=int)
    g.add_argument("--embed-dim", type=int)
    g.add_argument("--depth", type=int)
    g.add_argument("--num-heads", type=int)
    g.add_argument("--mlp-ratio", type=float)
    g.add_argument("--class-token", action=argparse.BooleanOptionalAction)
    g.add_argument("--drop-path", type=float, help="stochastic depth rate")
    g.add_argument("--pos-kwarg", action="append", metavar="KEY=VALUE", help="scheme option, e.g. theta=100")
    g = p.add_argument_group("data")
    g.add_argument("--data", help="data set name (default: shapes, embedded)")
    g.add_argument("--data-dir", help="where the data set's files are")
    g.add_argument("--download", action="store_true", help="allow downloading the data set (off by default)")
    g.add_argument("--batch-size", type=int, help="per-device batch size")
    g.add_argument("--num-workers", type=int)
    g.add_argument("--train-size", type=int, help="shapes: number of generated training images")
    g.add_argument("--val-size", type=int, help="shapes: number of validation images")
    g.add_argument("--test-size", type=int, help="shapes: number of test images")
    g.add_argument("--hflip", action=argparse.BooleanOptionalAction)
    g.add_argument("--randaugment", help="timm RandAugment spec, e.g. rand-m9-mstd0.5-inc1")
    g.add_argument("--mixup", type=float)
    g.add_argument("--cutmix", type=float)
    g.add_argument("--random-erasing", type=float)
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int)
    g.add_argument("--lr", type=float)
    g.add_argument("--lr-scaling", choices=["none", "linear"], help="linear: lr x global batch / 256")
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--warmup-epochs", type=float)
    g.add_argument("--label-smoothing", type=float)
    g = p.add_argument_group("trainer")
    g.add_argument("--accelerator", help="cpu | gpu | auto")
    g.add_argument("--devices", type=int)
    g.add_argument("--num-nodes", type=int)
    g.add_argument("--strategy", help="auto | ddp | fsdp | ...")
    g.add_argument("--precision", help="32-true | bf16-mixed | 16-mixed")
    g.add_argument("--seed", type=int)
    g.add_argument("--out", help="run folder (default: a fresh folder under runs/)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from checkpoints/last.ckpt")
    g.add_argument("--overwrite", action="store_true", help="move an existing run in --out aside and start anew")
    g.add_argument("--fast-dev-run", action="store_true", help="one batch of train and val, no checkpoints")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--ckpt-every-n-steps", type=int, help="also write last.ckpt every N optimizer steps")
    g.add_argument("--eval-resolutions", type=int, nargs="+", help="after training, sweep these test resolutions")
    g.add_argument("--train-resolutions", type=int, nargs="+", help="multi-resolution training: one per batch")
    return p


def _parse_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def config_from_args(args: argparse.Namespace, base: Config | None = None) -> Config:
    """Resolve defaults <- YAML (or ``base``) <- explicit flags into a validated Config."""
    given = vars(args)
    if base is not None:
        cfg = base
    elif "config" in given:
        cfg = Config.from_yaml(given["config"])
    else:
        cfg = Config()
    if "model" in given:
        apply_preset(cfg.model, given["model"])
    for flag, value in given.items():
        if flag in FLAG_FIELDS:
            section, name = FLAG_FIELDS[flag]
            setattr(getattr(cfg, section), name, value)
    for item in given.get("pos_kwarg", []) or []:
        if "=" not in item:
            raise ConfigError(f"--pos-kwarg expects KEY=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        cfg.model.pos_kwargs[k] = _parse_value(v)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Check names and numbers up front, so a bad value fails in one line before anything runs."""
    from .data import DATA_NAMES, is_data_name
    from .pos import POS_SCHEMES
    from .stems import STEMS

    m, d, o, t = cfg.model, cfg.data, cfg.optim, cfg.trainer
    if m.pos not in POS_SCHEMES:
        raise ConfigError(f"unknown --pos '{m.pos}'; valid: {', '.join(POS_SCHEMES)}")
    if m.stem not in STEMS:
        raise ConfigError(f"unknown --stem '{m.stem}'; valid: {', '.join(STEMS)}")
    if not is_data_name(d.name):
        raise ConfigError(f"unknown --data '{d.name}'; valid: {', '.join(DATA_NAMES)}, hf:NAME_OR_PATH")
    positive = {
        "--epochs": o.epochs,
        "--batch-size": d.batch_size,
        "--img-size": m.img_size,
        "--patch-size": m.patch_size,
        "--embed-dim": m.embed_dim,
        "--depth": m.depth,
        "--num-heads": m.num_heads,
        "--devices": t.devices,
        "--num-nodes": t.num_nodes,
    }
    for flag, v in positive.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ConfigError(f"{flag} must be a positive integer, got {v!r}")
    if not o.lr > 0:
        raise ConfigError(f"--lr must be positive, got {o.lr}")
    if m.embed_dim % m.num_heads:
        raise ConfigError(f"--embed-dim {m.embed_dim} is not divisible by --num-heads {m.num_heads}")
    for flag, values in (("--img-size", [m.img_size]), ("--train-resolutions", t.train_resolutions),
                         ("--eval-resolutions", t.eval_resolutions)):  # fmt: skip
        for r in values:
            if not isinstance(r, int) or r <= 0:
                raise ConfigError(f"{flag} values must be positive integers, got {r!r}")
            if r % m.patch_size:
                raise ConfigError(f"{flag} {r} is not a multiple of the patch size {m.patch_size}")
    if t.ckpt_every_n_steps is not None and t.ckpt_every_n_steps <= 0:
        raise ConfigError(f"--ckpt-every-n-steps must be positive, got {t.ckpt_every_n_steps}")
    if t.resume and t.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pass one")
