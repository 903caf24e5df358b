"""Command line <-> Config: dataclass defaults, then ``--config`` YAML, then explicit flags.

Every flag is generated from a config field (``vitpos.config.opt``: its help text, choices and
bounds are declared once, beside the field). Only flags the user actually typed override the
YAML (argparse defaults are suppressed), so ``--config configs/cifar10.yaml --epochs 5`` changes
the epochs and nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from .config import Config, apply_preset, check, choices_of, coerce, flag_of, walk
from .errors import ConfigError

_SECTION_TITLES = {"model": "model", "data": "data", "optim": "optimisation", "trainer": "trainer"}


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


def _help(f: dataclasses.Field, default: Any) -> str:
    text = f.metadata.get("help", "")
    choices = choices_of(f)
    if choices:
        text += f" {{{', '.join(choices)}}}"
    if "(default:" in text:  # the field says what its default means (e.g. a folder chosen at run time)
        return text.replace("%", "%%")
    if isinstance(default, bool):
        shown = "on" if default else "off"
    elif default is None or default == [] or default == {}:
        shown = "none"
    elif isinstance(default, tuple | list):
        shown = " ".join(map(str, default))
    else:
        shown = str(default)
    return f"{text} (default: {shown})".strip().replace("%", "%%")


def _add_field(group, f: dataclasses.Field, tp: Any) -> None:
    """One flag for one field, its argparse shape derived from the field's type."""
    flag, default = flag_of(f), f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    kw: dict[str, Any] = {"dest": f.name, "help": _help(f, default)}
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
        kw.update(type=args[0], nargs=len(args) if origin is tuple else "+", metavar=args[0].__name__.upper())
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


def _key_values(items: list[str], flag: str) -> dict[str, Any]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{flag} expects KEY=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v)
    return out


def validate(cfg: Config) -> None:
    """Check types, names and numbers up front, so a bad value fails in one line before anything runs."""
    check(cfg)  # every field: type, finite, bounds, choices
    m, t = cfg.model, cfg.trainer
    if m.embed_dim % m.num_heads:
        raise ConfigError(f"--embed-dim {m.embed_dim} is not divisible by --num-heads {m.num_heads}")
    for flag, values in (("--img-size", [m.img_size]), ("--train-resolutions", t.train_resolutions),
                         ("--eval-resolutions", t.eval_resolutions)):  # fmt: skip
        for r in values:
            if r % m.patch_size:
                raise ConfigError(f"{flag} {r} is not a multiple of the patch size {m.patch_size}")
    if t.resume and t.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pass one")
    if m.global_pool == "token" and not m.class_token:
        raise ConfigError("--global-pool token needs --class-token")
    _check_scheme_builds(cfg)


def _check_scheme_builds(cfg: Config) -> None:
    """Build the position scheme alone (small): its own constraints and options fail here, in one line."""
    from .pos import build_pos
    from .pos.base import parse_pos_aug

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
