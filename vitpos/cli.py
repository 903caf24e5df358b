"""Command line <-> Config: dataclass defaults, then ``--config`` YAML, then explicit flags.

Every flag is generated from a config field (``vitpos.config.opt``: its help text, choices and
bounds are declared once, beside the field). Only flags the user actually typed override the
YAML (argparse defaults are suppressed), so ``--config configs/cifar10.yaml --epochs 5`` changes
the epochs and nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import typing
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .config import Config, apply_preset, check, coerce, flag_of, walk
from .data import DATA_NAMES, HF_PREFIX, is_data_name
from .errors import ConfigError
from .pos import POS_SCHEMES, build_pos
from .pos.base import parse_pos_aug
from .resolution import parse_resolution, to_hw
from .stems import STEMS

_SECTION_TITLES = {"model": "model", "data": "data", "optim": "optimisation", "trainer": "trainer"}


def strategy_names() -> tuple[str, ...]:
    from lightning.pytorch.strategies import StrategyRegistry

    return ("auto", *StrategyRegistry.available_strategies())


# The names each registry a config field takes its value from (``opt(registry=...)``) offers, as the help shows them.
REGISTRIES = {
    "pos": lambda: tuple(POS_SCHEMES),
    "stem": lambda: tuple(STEMS),
    "data": lambda: (*DATA_NAMES, f"{HF_PREFIX}NAME_OR_PATH"),
    "strategy": strategy_names,
}


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    """A field's valid names (its fixed choices, or its registry's), or None when any value of its type goes."""
    registry = f.metadata.get("registry")
    return REGISTRIES[registry]() if registry else f.metadata.get("choices")


def is_choice(f: dataclasses.Field, value: str) -> bool:
    """Whether ``value`` is one of the field's names (for the data set: a registered name or hf:NAME_OR_PATH)."""
    if f.metadata.get("registry") == "data":
        return is_data_name(value)
    return value in (choices_of(f) or (value,))


def quiet_logs() -> None:
    """Silence Lightning's banners and tips (its info messages) and the warnings known to be harmless here.

    Lightning's own warnings (rank_zero_warn) and every other warning still show."""
    # (fabric's distributed module: "Initializing distributed: ...", one line per rank)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda",
                 "lightning.fabric.utilities.rank_zero", "lightning.fabric.utilities.distributed"):  # fmt: skip
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in (
        r".*does not have many workers.*",  # num_workers=0 is the CPU default here, on purpose
        r".*smaller than the logging interval.*",  # small sets: fewer batches than log_every_n_steps
        r".*LeafSpec.*",  # a deprecation inside Lightning's own pytree use
        r".*'set_vital' is deprecated.*",  # a deprecation inside torchdata's StatefulDataLoader
        r".*Experiment logs directory .* exists and is not empty.*",  # resumed runs append on purpose
        r".*Checkpoint directory .* exists and is not empty.*",  # idem
        r".*Your `IterableDataset` has `__len__` defined.*",  # streamed shards: LitData splits them between workers
    ):
        warnings.filterwarnings("ignore", message=message)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit 2, as for every other bad input (every vitpos command)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _optional(convert):
    """An argparse type that also reads 'none' as None (for fields whose default is None)."""

    def parse(text: str):
        return None if text.lower() in ("none", "null") else convert(text)

    parse.__name__ = convert.__name__  # argparse names the type in its error message
    return parse


def _int_or_text(text: str) -> int | str:
    """The int a text spells (R), else the text itself (HxW)."""
    return int(text) if text.strip().lstrip("-").isdigit() else text


def _help(f: dataclasses.Field, default: Any, shown: str | None = None) -> str:
    text = f.metadata.get("help", "")
    choices = choices_of(f)
    if choices:
        text += f" {{{', '.join(choices)}}}"
    if shown is None and "(default:" in text:  # the field says what its default means (a folder chosen at run time)
        return text.replace("%", "%%")
    if shown is None:
        shown = _shown(default)
    return f"{text} (default: {shown})".strip().replace("%", "%%")


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if default is None or default == [] or default == {}:
        return "none"
    if isinstance(default, tuple | list):
        return " ".join(map(str, default))
    return str(default)


def _add_field(group, f: dataclasses.Field, tp: Any, shown: str | None = None, **more: Any) -> None:
    """One flag for one field, its argparse shape derived from the field's type; ``shown``: what the help says an
    absent flag means (default: the field's default); ``more``: further add_argument keywords."""
    flag, default = flag_of(f), f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    kw: dict[str, Any] = {"dest": f.name, "help": _help(f, default, shown), **more}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    optional = type(None) in args
    if optional:
        tp = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif origin is dict:
        kw.update(action="append", metavar="KEY=VALUE")
    elif origin in (list, tuple):
        # int | str items are resolutions: R (an int) or HxW (text)
        item, metavar = (args[0], args[0].__name__.upper()) if isinstance(args[0], type) else (_int_or_text, "R")
        kw.update(type=item, nargs=len(args) if origin is tuple else "+", metavar=metavar)
    else:
        kw["type"] = _optional(tp) if optional else tp
        if choices_of(f):
            kw["metavar"] = "NAME"  # the names are in the help; validation explains a bad one in one line
    group.add_argument(flag, **kw)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="train.py",
        description="Train a ViT with a chosen patch-position scheme (defaults: the embedded `shapes` set, CPU).",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--config", help="YAML file with model/data/optim/trainer sections (flags override it)")
    cfg = Config()
    groups: dict[str, argparse._ArgumentGroup] = {}
    seen: set[str] = set()
    for name, section, f in walk(cfg):
        if not f.metadata.get("cli", True):
            continue
        if name not in groups:
            groups[name] = p.add_argument_group(_SECTION_TITLES.get(name, name))
            if name == "model":
                from .config import MODEL_PRESETS

                presets = ", ".join(MODEL_PRESETS)
                groups[name].add_argument(
                    "--model", help=f"size preset {{{presets}}}; explicit dims override it (default: none)"
                )
        if f.name in seen:  # two sections with one field name would share one flag's dest
            raise RuntimeError(f"config field name '{f.name}' appears in two sections")
        seen.add(f.name)
        _add_field(groups[name], f, typing.get_type_hints(type(section))[f.name])
    return p


def _field(name: str) -> tuple[type, dataclasses.Field]:
    """The section class and field of ``name`` ("section.field")."""
    section_name, field_name = name.split(".")
    section = getattr(Config(), section_name)
    return type(section), next(f for f in dataclasses.fields(section) if f.name == field_name)


def add_config_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, names: Sequence[str],
                     shown: str | None = None, **more: Any) -> None:  # fmt: skip
    """Flags for the config fields ``names`` ("section.field"), each declared as train.py declares it (one name, help,
    choices and bounds per setting, shared by every command). An absent flag leaves no attribute in the parsed
    namespace; ``shown`` is what the help says it means (default: the field's default)."""
    for name in names:
        section, f = _field(name)
        _add_field(parser, f, typing.get_type_hints(section)[f.name], shown, default=argparse.SUPPRESS, **more)


def given_fields(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """{"section.field": value} for each of ``names`` given in ``args``, checked as train.py checks it (type,
    bounds, names; a ConfigError naming the flag otherwise)."""
    cfg, given = Config(), [n for n in names if n.split(".")[1] in vars(args)]
    for name in given:
        section_name, field_name = name.split(".")
        setattr(getattr(cfg, section_name), field_name, vars(args)[field_name])
    check_fields(cfg)
    return {name: getattr(getattr(cfg, name.split(".")[0]), name.split(".")[1]) for name in given}


def device_error(accelerator: str) -> str | None:
    """Why ``--accelerator`` cannot run here, or None."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        return f"--accelerator {accelerator}: no CUDA GPU is available here; use --accelerator cpu"
    if accelerator == "mps" and not torch.backends.mps.is_available():
        return "--accelerator mps: MPS is not available here; use --accelerator cpu"
    return None


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
    for name, section, f in walk(cfg):
        if f.name not in given:
            continue
        value = given[f.name]
        if isinstance(getattr(section, f.name), dict):  # KEY=VALUE items update the mapping
            value = {**getattr(section, f.name), **_key_values(value, flag_of(f))}
        hint = typing.get_type_hints(type(section))[f.name]
        setattr(section, f.name, coerce(value, hint, f"{name}.{f.name}"))  # e.g. nargs=2 list -> tuple
    validate(cfg)
    return cfg


def asked_fields(args: argparse.Namespace) -> set[str]:
    """The config fields the command line sets: its flags, a --model preset's fields and the --config file's keys
    (field names are unique across sections)."""
    from .config import MODEL_PRESETS

    given = vars(args)
    names = set(given) - {"config", "model"}
    names |= set(MODEL_PRESETS.get(given.get("model", ""), {}))
    if "config" in given:
        data = _parse_value(Path(given["config"]).read_text()) or {}
        names |= {k for section in data.values() if isinstance(section, dict) for k in section}
    return names


def _key_values(items: list[str], flag: str) -> dict[str, Any]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{flag} expects KEY=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v)
    return out


def check_fields(cfg: Config) -> None:
    """Every field on its own: type, finiteness, bounds and names (fixed or from a registry)."""
    check(cfg)
    for _, section, f in walk(cfg):
        value = getattr(section, f.name)
        if f.metadata.get("registry") and value is not None and not is_choice(f, value):
            raise ConfigError(f"unknown {flag_of(f)} '{value}'; valid: {', '.join(choices_of(f))}")


def validate(cfg: Config) -> None:
    """Check types, names and numbers up front, so a bad value fails in one line before anything runs."""
    check_fields(cfg)
    m, t = cfg.model, cfg.trainer
    if m.embed_dim % m.num_heads:
        raise ConfigError(f"--embed-dim {m.embed_dim} is not divisible by --num-heads {m.num_heads}")
    for flag, values in (("--img-size", [m.img_size]), ("--train-resolutions", t.train_resolutions),
                         ("--eval-resolutions", t.eval_resolutions)):  # fmt: skip
        for r in values:
            try:
                hw = to_hw(parse_resolution(r))
            except ConfigError as e:
                raise ConfigError(f"{flag}: {e}") from None
            if any(side % m.patch_size for side in hw):
                raise ConfigError(f"{flag} {r} is not a multiple of the patch size {m.patch_size}")
    if t.resume and t.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pass one")
    if m.global_pool == "token" and not m.class_token:
        raise ConfigError("--global-pool token needs --class-token")
    _check_scheme_builds(cfg)


def _check_scheme_builds(cfg: Config) -> None:
    """Build the position scheme alone (small): its own constraints and options fail here, in one line."""
    m = cfg.model
    try:
        aug = parse_pos_aug(m.pos_aug)
    except ValueError as e:
        raise ConfigError(f"--pos-aug {m.pos_aug}: {e}") from None
    try:
        grid = (m.img_size // m.patch_size,) * 2
        build_pos(m.pos, dim=m.embed_dim, num_heads=m.num_heads, depth=m.depth, grid=grid,
                  num_prefix_tokens=int(m.class_token), pos_aug=aug, **m.pos_kwargs)  # fmt: skip
    except (ValueError, TypeError) as e:
        kwargs = f" with --pos-kwarg {m.pos_kwargs}" if m.pos_kwargs else ""
        raise ConfigError(f"--pos {m.pos}{kwargs}: {str(e).splitlines()[0]}") from None
