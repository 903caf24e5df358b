"""docs/resolution.md: the runs of docs/results.md at other resolutions with every transfer method, YaRN's blend and
temperatures, the published resolution claims held against them, and fine-tuning at a new size (docs/finetune.json),
from docs/resolution.json."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.pages.common import (
    CHANCE,
    anchors,
    fill,
    hardware_line,
    interval,
    label,
    lines,
    measured_line,
    read,
    rule_line,
    run_rule,
    table,
)
from benchmarks.pages.transfer import temperature_section, transfer_section
from benchmarks.stats import mean_ci, separated


def published_section(recs: list[dict], train: int) -> str | None:
    """The published resolution claims of docs/anchors.yaml against the same schemes here (default methods): LookHere's
    and DINOv3's at every size above the training one, LieRE's ranking at the largest size where both have seeds."""
    a, cells = anchors(), defaultdict(list)  # (scheme, side) -> top-1 per seed, square grids, patch stem
    for r in recs:
        if r["default_method"] and r["stem"] == "patch" and r["height"] == r["width"]:
            cells[r["scheme"], r["height"]].append(r["top1"])
    sides = sorted({s for _, s in cells if s >= train})
    if not sides:
        return None

    def verdict(hi: str, lo: str, side: int) -> str:
        """Published: ``hi`` above ``lo``; here, at ``side``."""
        x, y = cells.get((hi, side), []), cells.get((lo, side), [])
        if not x or not y:
            return "not measured here"
        if separated(x, y):
            return "agrees" if mean_ci(x)[0] > mean_ci(y)[0] else "disagrees"
        diff = 100 * (mean_ci(x)[0] - mean_ci(y)[0])
        return f"not separated ({diff:+.1f} points" + (", one seed)" if min(len(x), len(y)) < 2 else ")")

    def judged_at(hi: str, lo: str) -> int:
        """The largest size with seeds of both (an interval each), else the largest size with both measured."""
        both = [s for s in sides if len(cells.get((hi, s), [])) > 1 and len(cells.get((lo, s), [])) > 1]
        return max(both or [s for s in sides if cells.get((hi, s)) and cells.get((lo, s))] or sides)

    def at_each(hi: str, lo: str) -> str:
        """The verdict at every size above the training one."""
        return lines([f"- At {s} px ({s / train:g}x), `{hi}` above `{lo}`: {verdict(hi, lo, s)}."
                      for s in sides if s > train])  # fmt: skip

    def here(schemes: list[str]) -> str:
        return table(["scheme", *(f"{s} px ({s / train:g}x)" for s in sides)],
                     [[f"`{k}`", *(interval(cells.get((k, s), [])) for s in sides)]
                      for k in schemes])  # fmt: skip

    lh, lie, dino = a["lookhere"], a["liere_synthetic"], a["dinov3_rope"]
    order = sorted(lie["top1"], key=lambda k: -lie["top1"][k][-1])  # the published ranking at its largest size
    pairs = [
        (hi, lo) for i, hi in enumerate(order) for lo in order[i + 1 :] if lie["top1"][hi][-1] > lie["top1"][lo][-1]
    ]
    return fill(
        "resolution_published.md",
        train=str(train),
        lh_source=lh["source"],
        lh_setting=lh["setting"],
        lh_factor=f"{lh['test_px'] / lh['train_px']:.2f}x",
        lh_scheme=lh["scheme"],
        lh_points=f"{lh['points']:+g}",
        lh_against=lh["against"],
        lh_table=here([lh["scheme"], lh["against"]]),
        lh_verdicts=at_each(lh["scheme"], lh["against"]),
        lie_source=lie["source"],
        lie_setting=lie["setting"],
        lie_top1="; ".join(f"`{k}` {' / '.join(f'{v:g}' for v in vs)}" for k, vs in lie["top1"].items()),
        lie_table=here(order),
        lie_verdicts=lines(
            [
                f"- At {(at := judged_at(hi, lo))} px ({at / train:g}x), `{hi}` above `{lo}` (published "
                f"at {lie['px'][-1]} px): {verdict(hi, lo, at)}."
                for hi, lo in pairs
            ]
        ),  # fmt: skip
        dino_source=dino["source"],
        dino_setting=dino["setting"],
        dino_scheme=dino["scheme"],
        dino_against=dino["against"],
        dino_table=here([dino["scheme"], dino["against"]]),
        dino_verdicts=at_each(dino["scheme"], dino["against"]),
    )


def finetune_section(ft: dict, results: dict | None) -> str:
    """Swin v2's Table 1 on `shapes`: tested directly at each size against after one epoch of fine-tuning there, for
    the runs at the current default rule only (those of an earlier default are counted, not tabled)."""
    train = ft["train_resolution"]
    runs = {r["run"]: r for r in (results or {}).get("runs", [])}
    default = run_rule(results["budget"], "default_") if results else ()

    def now(run: str) -> bool:  # at the default rule and options (a run results.json lacks: taken to be)
        r = runs.get(run)
        return r is None or not r.get("pos_params") or (run_rule(r) == default and not r.get("pos_kwargs"))

    now_runs = [f for f in ft["finetuned"] if now(f["run"])]
    old_runs = [f for f in ft["finetuned"] if not now(f["run"])]
    n = int(ft["finetune"][ft["finetune"].index("--epochs") + 1])
    unit = "epoch" if n == 1 else "epochs"
    heads = ["scheme", f"{train} px", f"{train} px +{n} {unit}"]
    heads += [h for s in ft["sizes"] for h in (f"{s} px directly", f"{s} px fine-tuned")]
    rows, verdicts = finetune_table(ft, now_runs, runs)
    return fill(
        "resolution_finetune.md",
        rule_line=rule_line(sorted({Path(f["run"]).name for f in now_runs}), results, ft["command"]),
        command=ft["command"],
        train=str(train),
        more=f"{'one' if n == 1 else n} more {unit}",
        finetune=" ".join(ft["finetune"]),
        control=heads[2],
        hardware=hardware_line(now_runs),
        table=table(heads, rows),
        verdicts=lines(verdicts),
        # one current default, one set of numbers: an earlier default's table is retired (git keeps it)
        retired=str(len(old_runs)) if old_runs else None,
    )


def finetune_table(ft: dict, finetuned: list[dict], runs: dict[str, dict]) -> tuple[list[list[str]], list[str]]:
    """The rows of the ``finetuned`` runs (test top-1 at the training size from ``runs``, results.json's runs by
    folder), and the verdicts: fine-tuned against tested directly at each size."""
    train, sizes = ft["train_resolution"], ft["sizes"]
    trained = {f["run"] for f in finetuned}
    names = {Path(run).name for run in trained}
    direct, tuned, base = defaultdict(list), defaultdict(list), defaultdict(list)
    for r in ft["records"]:  # RUN/checkpoints/last.ckpt, its path absolute: the run by its folder's name
        if r["default_method"] and r["height"] == r["width"] and Path(r["checkpoint"]).parents[1].name in names:
            direct[r["scheme"], r["stem"], r["height"]].append(r["top1"])
    for f in finetuned:
        tuned[f["pos"], f["stem"], f["img_size"]].append(f["test_top1"])
    for run in trained & runs.keys():
        base[runs[run]["pos"], runs[run]["stem"]].append(runs[run]["test_top1"])
    rows, verdicts = [], []
    for k in dict.fromkeys((f["pos"], f["stem"]) for f in finetuned):
        cells = [interval(base[k]), interval(tuned[(*k, train)])]
        by: dict[str, list[str]] = defaultdict(list)  # verdict ("{}": where the sizes go) -> the sizes it holds at
        for s in sizes:
            cells += [interval(direct[(*k, s)]), interval(tuned[(*k, s)])]
            seeds = min(len(tuned[(*k, s)]), len(direct[(*k, s)]))
            if seeds == 0:
                continue  # nothing to compare: the cells say "—"
            if seeds == 1:
                by["one seed at {} px, so not compared"].append(f"{s}")
            elif separated(tuned[(*k, s)], direct[(*k, s)]):
                better = mean_ci(tuned[(*k, s)])[0] > mean_ci(direct[(*k, s)])[0]
                by[f"fine-tuned {'above' if better else 'below'} tested directly at {{}} px"].append(f"{s}")
            else:
                by["fine-tuned and tested directly not separated at {} px"].append(f"{s}")
        verdicts += [f"- {label(*k)}: {v.format(' and '.join(at))}." for v, at in by.items()]
        rows.append([label(*k), *cells])
    return rows, verdicts


def render(d: dict, folder: Path) -> str:
    train, blend = d["train_resolution"], d["yarn_blend"]
    rows = [[str(k), f"{f:.4f}", f"{g:.2f}", *(f"{v[k]:.3f}" for v in blend["ratio"].values())]
            for k, (f, g) in enumerate(zip(blend["frequencies"], blend["gamma"], strict=True))]  # fmt: skip
    results = read(folder / "results.json")
    ft = read(folder / "finetune.json")
    names = [Path(r["checkpoint"]).parents[1].name for r in d["records"]]
    return fill(
        "resolution.md",
        measured=measured_line(d),
        train=str(train),
        limit=str(d["limit"]),
        rule_line=rule_line(names, results, d["command"]),
        transfer=transfer_section(d["records"], train, folder / "resolution.png", CHANCE),
        train_len=str(blend["train_len"]),
        blend=table(["k", "f_k", "gamma", *(f"f'/f at {s}x" for s in blend["ratio"])], rows),
        temperature=temperature_section(d["yarn_temperature"]) if d["yarn_temperature"] else None,
        published=published_section(d["records"], train),
        finetune=finetune_section(ft, results) if ft else None,
    )
