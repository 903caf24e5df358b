"""docs/fashion_mnist.md: the position schemes on Fashion-MNIST over seeds, their validation curves, and transfer to
other resolutions, from docs/fashion_mnist.json."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from benchmarks.pages.common import (
    comparisons,
    fields,
    figure,
    fill,
    hardware_line,
    label,
    line_style,
    lines,
    measured_line,
    rule_words,
    run_row,
    run_rule,
    scheme_of,
    table,
)
from benchmarks.pages.transfer import temperature_section, transfer_section
from benchmarks.rules import pos_rule_of
from benchmarks.stats import mean_ci
from vitpos.config import Config

STILL = 0.01  # a mean validation curve that moved this much or more over the last three epochs is still moving


def render(d: dict, folder: Path) -> str:
    b = d["budget"]
    by = defaultdict(list)
    for r in d["runs"]:
        by[scheme_of(r), r["stem"]].append(r)
    order = sorted(by, key=lambda k: -mean_ci([r["test_top1"] for r in by[k]])[0])
    now = tuple(pos_rule_of(vars(Config().optim)).values())
    optioned = ", ".join(label(*k) for k in order if "|" in k[0])
    stale = [f"The default rule now differs ({rule_words(now)})"] if run_rule(b) != now else []
    stale += [f"these runs set scheme options that are not the defaults: {optioned}"] if optioned else []
    epochs = {k: list(zip(*(r["val_curve"] for r in by[k]), strict=False)) for k in order}  # per epoch, one per seed
    mean = {k: [sum(v) / len(v) for v in e] for k, e in epochs.items()}  # the mean validation curve
    drift = {k: c[-1] - c[-4] if len(c) >= 4 else math.nan for k, c in mean.items()}
    moving = [label(*k) for k in order if not abs(drift[k]) < STILL]
    curves_png = folder / "fashion_mnist_curves.png"
    with figure(curves_png, "lower right") as ax:
        for i, (k, e) in enumerate(epochs.items()):
            ax.plot(range(1, len(e) + 1), [100 * sum(v) / len(v) for v in e], markersize=3,
                    **line_style(i, "os^Dv<>ph*", *k))  # fmt: skip
        ax.set(xlabel="epoch", ylabel="validation top-1 (%), mean over seeds")
    temperature = temperature_section(d["yarn_temperature"]) if d["yarn_temperature"] else None
    return fill(
        "fashion_mnist.md",
        measured=measured_line(d),
        config=b["config"],
        seeds=", ".join(map(str, sorted({r["seed"] for r in d["runs"]}))),
        **fields(
            b,
            "embed_dim",
            "depth",
            "num_heads",
            "patch_size",
            "img_size",
            "train_limit",
            "holdout_size",
            "epochs",
            "batch_size",
        ),
        lr=f"{b['lr']:g}",
        rule=rule_words(run_rule(b)),
        stale="; ".join(stale) or None,
        command=d["command"],
        hardware=hardware_line(d["runs"], "the runs"),
        runs=table(
            ["scheme", "test top-1", "best val top-1", "last 3 epochs", "train time"],
            [run_row(k, by[k], f"{100 * drift[k]:+.1f}") for k in order],
        ),
        moving=f"Still moving by 1 point or more over the last three epochs: {', '.join(moving)}."
        if moving
        else "Every scheme's mean validation curve moved less than 1 point over the last three epochs.",
        curves=curves_png.name,
        allowed=lines(comparisons({k: [r["test_top1"] for r in rs] for k, rs in by.items()})),
        eval_limit=str(b["eval_limit"] or 10000),
        transfer=transfer_section(d["records"], b["img_size"], folder / "fashion_mnist_resolution.png", 0.1),
        temperature=fill("fashion_mnist_temperature.md", section=temperature) if temperature else None,
    )
