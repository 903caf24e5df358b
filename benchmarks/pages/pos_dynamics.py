"""docs/pos_dynamics.md: per run of benchmarks/pos_dynamics.py, its top-1 and its position parameters' rms and
gradient rms over training, each scheme against the first under the same rule, from docs/pos_dynamics.json."""

from __future__ import annotations

from pathlib import Path
from statistics import median

from benchmarks.pages.common import figure, fill, measured_line, pct, rule_label, rule_words, run_rule, spread, table

ALIKE = 1.25  # two runs' position parameters "move alike" where every logged ratio lies within [1/ALIKE, ALIKE]


def render(d: dict, folder: Path) -> str:
    """Per run: its top-1 and its position parameters' rms and gradient rms over training; each scheme against the
    first (``learned``) under the same rule, step by step."""
    runs, b = d["runs"], d["budget"]
    default = run_rule(b)  # the default when the runs trained

    def rule_name(r: dict) -> str:
        return rule_label(run_rule(r), default) if r["rule"] == "default" else "off (x 1, no decay)"

    rows = []
    for r in runs:
        peak = max(range(len(r["rms"])), key=r["rms"].__getitem__)
        rows.append([f"`{r['pos']}`", rule_name(r), pct(r["test_top1"]), pct(r["train_top1"]),
                     f"{r['rms'][0]:.3f} (step {r['step'][0]})", f"{r['rms'][peak]:.3f} (step {r['step'][peak]})",
                     f"{r['rms'][-1]:.3f}",
                     f"{median(r['grad_rms']):.1e}"])  # fmt: skip
    base = runs[0]["pos"]
    pairs, alike = [], []
    for r in runs:
        ref = next(x for x in runs if x["pos"] == base and x["rule"] == r["rule"])
        if r is ref:
            continue
        at = {step: i for i, step in enumerate(r["step"])}
        both = [(at[step], i) for i, step in enumerate(ref["step"]) if step in at]  # the steps both runs logged
        ratio = {k: [r[k][j] / ref[k][i] for j, i in both] for k in ("rms", "grad_rms")}
        top1 = f"{pct(r['test_top1'])} / {pct(ref['test_top1'])}"
        pairs.append([f"`{r['pos']}` / `{base}`", rule_name(r), spread(ratio["rms"], ".2f"),
                      spread(ratio["grad_rms"], ".2f"), top1])  # fmt: skip
        if all(1 / ALIKE <= v <= ALIKE for v in ratio["rms"]) and 1 / ALIKE <= median(ratio["grad_rms"]) <= ALIKE:
            alike.append(f"`{r['pos']}` under the {r['rule']} rule")
    png = folder / "pos_dynamics.png"
    with figure(png, "upper right") as ax:
        for i, r in enumerate(runs):
            ax.plot(r["step"], r["rms"], markevery=6, markersize=3, linestyle="-" if r["rule"] == "default" else "--",
                    marker="os^Dv"[i % 5], label=f"{r['pos']}, rule {r['rule']}")  # fmt: skip
        ax.set(xlabel="optimizer step", ylabel="rms of the position parameters", yscale="log")
    return fill(
        "pos_dynamics.md",
        measured=measured_line(d),
        seed=str(runs[0]["seed"]),
        epochs=str(b["epochs"]),
        batch_size=str(b["batch_size"]),
        lr=f"{b['lr']:g}",
        rule=rule_words(run_rule(b)),
        runs=table(
            [
                "scheme",
                "rule",
                "test top-1",
                "train top-1",
                "rms, first logged",
                "rms at its peak",
                "rms at the end",
                "gradient rms, median",
            ],
            rows,
        ),  # fmt: skip
        base=base,
        pairs=table(["runs", "rule", "rms", "gradient rms", "test top-1"], pairs),
        alike=", ".join(alike) if alike else None,
        factor=f"{ALIKE:g}",
        png=png.name,
    )
