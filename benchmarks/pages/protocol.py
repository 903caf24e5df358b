"""docs/protocol.md: what each default was chosen on (validation), from docs/protocol.json and docs/study.json."""

from __future__ import annotations

from benchmarks.pages.common import fill, pct, signed, table


def rule_text(rule: dict) -> str:
    decay = (
        "no decay"
        if not rule["pos_weight_decay"]
        else f"decay {rule['pos_weight_decay']:g} towards {rule['pos_decay_to']}"
    )
    ramp = f"ramped in over {rule['pos_lr_warmup_epochs']:g} epochs" if rule["pos_lr_warmup_epochs"] else "no ramp"
    return f"lr x{rule['pos_lr_scale']:g}, {decay}, {ramp}"


def default_method(spec: str) -> str:
    """The transfer method a POS:STEM model serves a new grid with unless told otherwise (vitpos's default)."""
    import vitpos

    pos, _, stem = spec.partition(":")
    model = vitpos.create_model(pos, stem=stem or "patch", img_size=8, patch_size=4, embed_dim=16, depth=1,
                                num_heads=2)  # fmt: skip
    return model.pos.method


def render(protocol: dict, study: dict | None) -> str:
    chosen = protocol["rule"]["chosen"]
    rows = [[rule_text(t["other"]), str(t["pairs"]), signed(t["mean_diff"]), f"{t['wins']} / {t['losses']}"]
            for t in protocol["rule"]["comparisons"] if t["rule"] == chosen]  # fmt: skip
    start = protocol["start"]
    top = protocol["top_others"]
    ev = protocol["evidence"]
    choices = (study or {}).get("choices", {})
    per_method = {
        spec: ", ".join(f"{m} {pct(v)}" for m, v in sorted(c["val_mean"].items())) for spec, c in choices.items()
    }
    method_rows = [[f"`{spec}`", f"`{c['method']}`", f"`{default_method(spec)}`", per_method[spec],
                    str(c["cells"])]
                   for spec, c in sorted(choices.items())]  # fmt: skip
    return fill(
        "protocol.md",
        rule=rule_text(chosen),
        rule_table=table(["other rule", "shared runs", "chosen minus other (points)", "runs above / below"], rows),
        evidence=f"{ev['runs']} runs of `{ev['command']}` in {ev['file']} (hardware: {', '.join(ev['hardware'])})",
        start=f"`locality` {start['chosen']}" if start["chosen"] is not None else "not chosen",
        start_detail=", ".join(f"locality {k}: {pct(v)} %" for k, v in start["val_mean"].items())
        + f" (seeds {', '.join(map(str, start['seeds']))})",
        top=", ".join(f"`{s}`" for s in top["chosen"]),
        top_detail=", ".join(f"`{s}` {pct(v)}" for s, v in list(top["seed0_val"].items())[:6]),
        methods=table(
            ["scheme", "chosen", "vitpos's default", "mean validation top-1 (%) per method", "cells"], method_rows
        )  # fmt: skip
        if method_rows
        else "Not chosen yet: the study has swept no checkpoint on validation.",
        command=protocol["command"],
    )
