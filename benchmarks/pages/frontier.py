"""docs/frontier.md: the newer schemes (`fire`, `string`) against `rope2d` under both regimes, each difference paired
by seed, and the FIRE extrapolation benchmark's claim held against them, from docs/frontier.json (benchmarks/study.py
with ``--runs rope2d:patch fire:patch string:patch --json docs/frontier.json``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.common import anchors, fill, lines, pct, same_checkpoint, signed, table
from benchmarks.pages.summary import Study, cost_line, entropy_table, head, label, real_line, study_machines
from benchmarks.stats import Difference, holm, paired

# the columns a page shows, of those measured (4x: the study's --far, with each scheme's chosen method; Fashion-MNIST:
# docs/fashion_mnist_study.json's runs of these schemes, tested at the data set's native size)
COLUMNS = [("zoom", 1.0), ("zoom", 0.75), ("zoom", 1.5), ("zoom", 2.0), ("zoom", 4.0), ("canvas", 1.5),
           ("canvas", 2.0), ("canvas", 4.0), ("fmnist", "native")]  # fmt: skip


def measured(study: Study, columns: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The training-size column and each other column that some scheme has a cell in."""
    return columns[:1] + [c for c in columns[1:] if any(study.values(s, c) for s in study.specs)]


# (a, b): a - b per column; FIRE's claim is the first two (a bias above rotations), string's price the third
PAIRS = [("fire:patch", "rope2d:patch"), ("fire:patch", "string:patch"), ("string:patch", "rope2d:patch")]


def differences(study: Study, columns: list[tuple[str, float]]) -> dict[tuple[str, str, tuple], Difference]:
    """a - b for each of PAIRS and ``columns`` where both have two or more seeds in common, paired by seed and
    Holm-corrected together (the page's family)."""
    found = {}
    for a, b in PAIRS:
        for column in columns:
            x, y = study.values(a, column), study.values(b, column)
            shared = sorted(set(x) & set(y))
            if len(shared) >= 2:
                found[(a, b, column)] = paired([x[k] for k in shared], [y[k] for k in shared])
    return dict(zip(found, holm(list(found.values())), strict=True))


def difference_text(d: Difference | None) -> str:
    if d is None:
        return "—"
    mark = "" if d.verdict == "not separated" else " *"
    return f"{signed(d.diff)} [{signed(d.low)}, {signed(d.high)}]{mark}"


def differences_table(study: Study, diffs: dict, columns: list[tuple[str, float]]) -> str:
    rows = [[f"{label(a)} − {label(b)}", *(difference_text(diffs.get((a, b, c))) for c in columns)] for a, b in PAIRS]
    return table(["difference (points)", *(head(*c) for c in columns)], rows)


def claim_lines(study: Study, diffs: dict) -> list[str]:
    """FIRE's published claim (docs/anchors.yaml) at the largest factor measured in each regime: `fire` above
    `rope2d`, and a bias above the rotations (`fire` above `string` too)."""
    claim = anchors()["fire_extrapolation"]
    factor = claim["test_px"] / claim["train_px"]
    out = []
    for regime in ("zoom", "canvas"):
        measured = sorted({c[1] for (_, _, c) in diffs if c[0] == regime and c[1] > 1})
        if not measured:
            out.append(f"- {regime.capitalize()}: no factor above 1x has two seeds of both schemes yet.")
            continue
        column = (regime, measured[-1])
        for a, b in PAIRS[:2]:
            d = diffs[(a, b, column)]
            verdict = {"above": "agrees", "below": "disagrees"}.get(d.verdict, "not separated (the runs cannot tell)")
            out.append(
                f"- {head(*column)} (the largest measured here; published at {factor:.2f}x): {label(a)} above "
                f"{label(b)}: {verdict}, {signed(d.diff)} [{signed(d.low)}, {signed(d.high)}] points (paired over "
                f"{d.n_a} seeds, Holm p = {d.p_holm:.3g})."
            )
    return out


def reproductions(study: Study, main: dict | None) -> str:
    """Each frontier run that docs/study.json also holds (same scheme and seed): both test top-1 and both commits. A
    run held by one checkpoint in both records is no rerun: such runs are counted in a line."""
    if not main:
        return "No study record to compare with."
    other = {(r["spec"], r["seed"]): r for r in main.get("runs", [])}
    rows, shared = [], []
    for r in sorted(study.data.get("runs", []), key=lambda r: (r["spec"], r["seed"])):
        o = other.get((r["spec"], r["seed"]))
        if o is None or "test_top1" not in r or "test_top1" not in o:
            continue
        if same_checkpoint(r, o):
            shared.append(r["spec"])
            continue
        val = [x.get("best_val_top1") for x in (o, r)]
        rows.append([label(r["spec"]), str(r["seed"]), f"{pct(o['test_top1'])} ({o.get('commit', '?')})",
                     f"{pct(r['test_top1'])} ({r.get('commit', '?')})",
                     f"{100 * (r['test_top1'] - o['test_top1']):+.2f}",
                     "—" if None in val else f"{100 * (val[1] - val[0]):+.2f}"])  # fmt: skip
    if not rows and not shared:
        return "No frontier run is in the study's record."
    heads = ["scheme", "seed", "docs/study.json (commit)", "here (commit)", "test difference (points)",
             "best validation difference (points)"]  # fmt: skip
    counts = ", ".join(f"{shared.count(s)} of {label(s)}" for s in dict.fromkeys(shared))
    line = f"The study's own runs, the same checkpoints (no rerun to compare): {counts}." if shared else ""
    return "\n\n".join(x for x in (table(heads, rows) if rows else "", line) if x)


def render(data: dict, folder: Path, main: dict | None = None, cost: dict | None = None,
           fmnist: dict | None = None) -> str:  # fmt: skip
    """docs/frontier.md from docs/frontier.json (``main``: docs/study.json; ``cost``: docs/cost.json; ``fmnist``:
    docs/fashion_mnist_study.json)."""
    study = Study(data, cost, fmnist)
    columns = measured(study, COLUMNS)
    diffs = differences(study, columns)
    claim = anchors()["fire_extrapolation"]
    seeds = study.seeds()
    return fill(
        "frontier.md",
        command=data["command"],
        seeds=", ".join(f"{label(s)} {len(v)}" for s, v in seeds.items()) or "none",
        sizes=", ".join(data.get("sizes", [])),
        real=f" {real_line(study)}" if ("fmnist", "native") in columns else "",
        cost=cost_line(cost),
        table=study.table(columns),
        differences=differences_table(study, diffs, columns) if diffs else "No pair has two shared seeds yet.",
        claim_source=claim["source"],
        claim_setting=claim["setting"],
        claim_numbers=", ".join(f"`{k}` {v:g} %" for k, v in claim["top1"].items()),
        claim=lines(claim_lines(study, diffs)),
        entropy=entropy_table(study),
        reproductions=reproductions(study, main),
        machines=study_machines(data),
    )
