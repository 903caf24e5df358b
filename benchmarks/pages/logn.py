"""docs/logn.md: log-n attention scaling under zoom, each checkpoint as it is against the same checkpoint with the
scaling, paired by seed, from docs/logn.json (benchmarks/logn.py)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.pages.common import cell, fill, machines, table
from benchmarks.pages.frontier import difference_text
from benchmarks.pages.summary import label, labels, page_order
from benchmarks.stats import Difference, holm, paired


def cells(data: dict) -> dict[tuple[str, str, str, int], dict[int, float]]:
    """(spec, split, scaling, size) -> {seed: top-1}."""
    out: dict[tuple[str, str, str, int], dict[int, float]] = defaultdict(dict)
    for r in data.get("records", []):
        out[(r["spec"], r["split"], r["sweep"]["logit_scaling"], r["resolution"])][r["seed"]] = r["top1"]
    return out


def gain(got: dict, spec: str, split: str, size: int) -> Difference | None:
    """With log-n minus as it is, paired by seed (the same checkpoint twice), or None below two shared seeds."""
    x, y = got.get((spec, split, "logn", size), {}), got.get((spec, split, "none", size), {})
    shared = sorted(set(x) & set(y))
    return paired([x[k] for k in shared], [y[k] for k in shared]) if len(shared) >= 2 else None


def render(data: dict, folder: Path) -> str:
    got = cells(data)
    specs, train = page_order({r["spec"] for r in data.get("records", [])}), data["train_size"]
    sizes = [int(s) for s in data["sizes"]]
    found = {(s, z): d for s in specs for z in sizes if (d := gain(got, s, "test", z)) is not None}
    corrected = dict(zip(found, holm(list(found.values())), strict=True))
    rows = []
    for s in specs:
        row = [label(s), f"`{next(r['sweep']['method'] for r in data['records'] if r['spec'] == s)}`"]
        for z in sizes:
            row += [cell(list(got.get((s, "test", "none", z), {}).values())), difference_text(corrected.get((s, z)))]
        rows.append(row)
    heads = ["scheme", "method (val)"]
    for z in sizes:
        heads += [f"zoom {z / train:g}x, as it is", "with log-n (points)"]
    # the protocol's side: would validation choose the scaling (its mean over the sizes above that of the method alone)?
    chooses, declines = [], []
    for s in specs:
        diffs = [d.diff for z in sizes if (d := gain(got, s, "val", z)) is not None]
        if diffs:
            (chooses if sum(diffs) > 0 else declines).append(s)
    limit = next((r["sweep"]["limit"] for r in data.get("records", []) if r["split"] == "val"), None)
    val = (f"On validation ({f'its first {limit:,}' if limit else 'all its'} images per cell, both sides), log-n "
           f"raises the mean over these sizes for {labels(chooses) or 'no scheme'}"
           f"{f' and not for {labels(declines)}' if chooses and declines else ''}: a study offering the scaling as a "
           f"method would choose it {'there' if chooses else 'for none'}.")  # fmt: skip
    return fill(
        "logn.md",
        command=data["command"],
        study=data.get("study", "?"),
        train=str(train),
        table=table(heads, rows) if found else "No scheme has two seeds measured both ways yet.",
        validation=val if chooses or declines else None,
        machines="\n".join(f"- {m}" for m in machines(data.get("records", []))),
    )
