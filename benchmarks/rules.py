"""How the studies name a run's position rule and its scheme options: as keys that group runs, and as the parts of
a run folder's name."""

from __future__ import annotations

from typing import Any

POS_RULE = ("pos_lr_scale", "pos_weight_decay", "pos_decay_to", "pos_lr_warmup_epochs")  # OptimConfig's fields


def pos_rule(scale: float, decay: float = 0.0, decay_to: str = "zero", ramp: float = 0.0) -> dict[str, Any]:
    """The position rule as its fields, with one spelling for rules that train alike: a target only with a decay
    ("none" without one), a ramp only where the scale is not 1. The defaults are what a record meant before a field
    existed: no decay, towards zero, no ramp."""
    values = float(scale), float(decay), decay_to if decay else "none", float(ramp) if scale != 1 else 0.0
    return dict(zip(POS_RULE, values, strict=True))


def pos_rule_of(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The rule a record names with ``prefix`` + POS_RULE keys (a config's optim section, a study's run record),
    each field it lacks taken as before that field existed."""
    return pos_rule(*(record.get(prefix + k, d) for k, d in zip(POS_RULE, (1.0, 0.0, "zero", 0.0), strict=True)))


def option_leaves(opts: dict[str, Any]) -> list[tuple[str, Any]]:
    """Scheme options (``ModelConfig.pos_kwargs``) as sorted (key, value) leaves, a composition's parts' options by
    their own keys: {"relbias": {"locality": 0}} gives [("locality", 0)]. What names and groups runs by their
    options."""
    return sorted(kv for k, v in opts.items() for kv in (option_leaves(v) if isinstance(v, dict) else [(k, v)]))
