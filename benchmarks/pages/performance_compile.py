"""docs/performance_compile.md: torch.compile against eager per scheme, a training step and evaluation at several
grids, from docs/performance_compile.json."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import median

from benchmarks.pages.common import fill, measured_line, per_round, spread, table
from benchmarks.pages.performance import model_line


def render(d: dict, folder: Path) -> str:
    rows, ups = [], defaultdict(list)
    for r in d["rows"]:
        up = per_round(r["compiled_img_s"], r["eager_img_s"])
        ups[r["mode"]].append(median(up))
        rows.append([f"`{r['scheme']}`", r["mode"], f"{r['grid']}x{r['grid']}", f"{r['first_call_s']:.1f}",
                     f"{median(r['eager_img_s']):.1f}", f"{median(r['compiled_img_s']):.1f}",
                     spread(up, ".2f")])  # fmt: skip
    return fill(
        "performance_compile.md",
        measured=measured_line(d),
        model=model_line(d),
        table=table(["scheme", "mode", "grid", "first call (s)", "eager img/s", "compiled img/s", "speed-up"], rows),
        ranges=", ".join(f"{min(v):.2f}-{max(v):.2f}x in {k}" for k, v in ups.items()),
    )
