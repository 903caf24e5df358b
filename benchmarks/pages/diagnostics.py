"""docs/diagnostics.md: one row per run of benchmarks/diagnostics.py (patch-shuffle top-1, attention distance, links
to its pictures), from docs/diagnostics.json."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.common import fill, measured_line, read, rule_line, table


def render(d: dict, folder: Path) -> str:
    rows = []
    for r in d["runs"]:
        sh, dist, name = r["patch_shuffle"], r["attention_distance"], r["run"]
        pics = " ".join(f"[{Path(n).stem}](diagnostics/{name}/{n})" for n in r["pictures"])
        rows.append([f"`{name}`", f"{100 * sh['top1']:.1f} %", f"{100 * sh['top1_shuffled']:.1f} %",
                     f"{100 * sh['drop']:+.1f} pts", f"{dist[0]:.2f} / {dist[-1]:.2f}", pics])  # fmt: skip
    return fill(
        "diagnostics.md",
        measured=measured_line(d),
        num_images=str(d["num_images"]),
        rule_line=rule_line([r["run"] for r in d["runs"]], read(folder / "rules.json"), d["command"]),
        table=table(
            ["run", "top-1", "top-1, patches shuffled", "drop", "attention distance, first / last block", "pictures"],
            rows,
        ),  # fmt: skip
    )
