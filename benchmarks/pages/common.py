"""What the pages share: reading a study's JSON, formatting cells and tables, filling a page's template."""

from __future__ import annotations

import json
import math
from pathlib import Path
from string import Template

from benchmarks.stats import mean_ci

DOCS = Path(__file__).resolve().parents[2] / "docs"
HERE = Path(__file__).resolve().parent
CHANCE, BAG_CEILING = 0.125, 0.25  # `shapes`: 8 classes; a model blind to patch order tells 2 of them apart


def read(path: Path) -> dict | None:
    """A benchmark's JSON record, if there is one."""
    return json.loads(path.read_text()) if path.is_file() else None


def fill(template: str, **blocks: str) -> str:
    """The page: its template (beside this file) with every $name replaced; a missing name is an error."""
    return Template((HERE / template).read_text()).substitute(**blocks).rstrip() + "\n"


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def pct(v: float) -> str:
    return "—" if v is None or math.isnan(v) else f"{100 * v:.1f}"


def cell(values: list[float]) -> str:
    """A mean over seeds with its 95 % t-interval's half-width, or the single value marked as one seed."""
    if not values:
        return "—"
    m, lo, hi = mean_ci(values)
    if len(values) == 1:
        return f"{pct(m)}¹"
    return f"{pct(m)} ±{100 * (hi - lo) / 2:.1f}"


def signed(v: float) -> str:
    return f"{100 * v:+.1f}"


def machines(*records: list[dict]) -> list[str]:
    """The distinct hardware / device / commit / torch of records, each as one phrase."""
    seen = {(r.get("hardware", "?"), r.get("device", "?"), r.get("commit", "?"), r.get("torch", "?"))
            for recs in records for r in recs}  # fmt: skip
    return [f"{h} ({d}), torch {t}, commit {c}" for h, d, c, t in sorted(seen)]
