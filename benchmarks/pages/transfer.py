"""The sections docs/resolution.md and docs/fashion_mnist.md both carry: every scheme and transfer method at every
resolution (with where the methods separate, and a figure), and YaRN's two attention temperatures."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.pages.common import figure, fill, interval, label, line_style, lines, table
from benchmarks.stats import mean_ci, separated
from vitpos.resolution import resolution_label


def transfer_section(recs: list[dict], train: int, png: Path, chance: float) -> str:
    """The transfer table (every scheme and method, mean [interval] over seeds), where methods separate, the plot."""
    cells = defaultdict(list)  # (scheme, stem, method, (h, w)) -> top-1 per seed
    for r in recs:
        cells[r["scheme"], r["stem"], r["method"], (r["height"], r["width"])].append(r["top1"])
    grids = sorted({(r["height"], r["width"]) for r in recs}, key=lambda hw: (hw[0] * hw[1], hw))
    rows = list(dict.fromkeys((r["scheme"], r["stem"], r["method"], r["default_method"]) for r in recs))
    body = [[label(s, st), m + (" (default)" if default else "")]
            + [interval(cells.get((s, st, m, g), [])) for g in grids]
            for s, st, m, default in rows]  # fmt: skip
    wins = []
    for scheme, stem in dict.fromkeys((s, st) for s, st, _, _ in rows):
        methods = [m for s, st, m, _ in rows if (s, st) == (scheme, stem)]
        for g in grids:
            best = max(methods, key=lambda m: mean_ci(cells.get((scheme, stem, m, g)) or [0.0])[0])
            worse = [f"`{m}`" for m in methods if separated(cells[scheme, stem, best, g], cells[scheme, stem, m, g])]
            if worse:
                wins.append(f"- {label(scheme, stem)} at {g[0]}x{g[1]}: `{best}` beats {', '.join(worse)}.")
    square = [g for g in grids if g[0] == g[1]]
    with figure(png, "lower left") as ax:
        for i, (scheme, stem, method, _) in enumerate(r for r in rows if r[3]):  # each scheme's default method
            xs = [g[0] for g in square if cells.get((scheme, stem, method, g))]
            stats = [mean_ci(cells[scheme, stem, method, (x, x)]) for x in xs]
            err = [[100 * (m - lo) for m, lo, _ in stats], [100 * (hi - m) for m, _, hi in stats]]  # one seed: 0
            ax.errorbar(xs, [100 * m for m, _, _ in stats], yerr=err, capsize=3,
                        **line_style(i, "osD^v<>ph*", scheme, stem, f": {method}"))  # fmt: skip
        ax.axhline(100 * chance, color="grey", linestyle=":", label="chance")
        ax.axvline(train, color="black", linewidth=0.8, label=f"trained at {train} px")
        ax.set(xlabel="test resolution (px)", ylabel="test top-1 (%)", ylim=(0, 100), xticks=[g[0] for g in square])
    return fill(
        "transfer.md",
        table=table(["scheme", "method", *map(resolution_label, grids)], body),
        wins=lines(wins),
        png=png.name,
    )


def temperature_section(temp: list[dict]) -> str:
    """YaRN's attention temperature, scale from the larger axis or from the token-count ratio, over seeds."""
    by = defaultdict(list)
    for t in temp:
        by[t["temperature"], t["resolution"]].append(t["top1"])
    res = list(dict.fromkeys(t["resolution"] for t in temp))
    better = [f"- at {r}: `{'axis' if mean_ci(by['axis', r])[0] > mean_ci(by['tokens', r])[0] else 'tokens'}` is "
              "better." for r in res if separated(by["axis", r], by["tokens", r])]  # fmt: skip
    return fill(
        "temperature.md",
        table=table(["temperature", *res], [[m, *(interval(by[m, r]) for r in res)] for m in ("axis", "tokens")]),
        better=lines(better or ["- The two temperatures are not separated at any of these sizes."]),
    )
