"""docs/fashion_mnist_study.md: the study's protocol on real data. Every main scheme trained on Fashion-MNIST below its
native size and tested up to it, so that a larger test size carries real detail (zoom) or only more background
(canvas); the methods chosen on its own validation split; and the position rule on against off, seed for seed. From
docs/fashion_mnist_study.json and docs/fashion_mnist_rule_off.json (benchmarks/study.py with ``--config
configs/fashion_mnist_study.yaml --img-size 16``, the second with ``--rule off``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.augmentation import differences, method_rows
from benchmarks.pages.common import fill, table
from benchmarks.pages.frontier import difference_text, measured
from benchmarks.pages.summary import Study, head, label, study_machines


def columns_of(data: dict) -> list[tuple[str, float]]:
    """The training size, then every other size under zoom and each larger one under canvas, as factors."""
    train = data["budget"]["img_size"]
    sizes = sorted(int(s) for s in data.get("sizes", []))
    zoom = [("zoom", s / train) for s in sizes if s != train]
    return [("zoom", 1.0), *zoom, *(("canvas", s / train) for s in sizes if s > train)]


def rule_section(on: Study, off: Study | None, columns: list[tuple[str, float]]) -> str:
    """Rule on minus off, paired by seed, for the schemes the rule can change (those with position parameters, which
    the ablation's runs hold), Holm-corrected over the table."""
    if off is None:
        return "Not measured yet: no record with the rule off (docs/fashion_mnist_rule_off.json)."
    diffs = differences(on, [off], columns)
    specs = [s for s in on.specs if any((s, c) in diffs for c in columns)]
    if not specs:
        return "No scheme has two seeds both with the rule and without it yet."
    rows = [[label(s), *(difference_text(diffs.get((s, c))) for c in columns)] for s in specs]
    return table(["rule on − off (points)", *(head(*c) for c in columns)], rows)


def render(data: dict, folder: Path, off: dict | None = None) -> str:
    """docs/fashion_mnist_study.md from docs/fashion_mnist_study.json (``off``: the same study with the rule off)."""
    study = Study(data)
    columns = measured(study, columns_of(data))
    budget = data["budget"]
    return fill(
        "real_data.md",
        train=str(budget["img_size"]),
        native=str(max((int(s) for s in data.get("sizes", [])), default=budget["img_size"])),
        subset=str(budget.get("train_limit") or "all"),
        command=data["command"],
        off_command=(off or {}).get("command", "not run"),
        seeds=", ".join(f"{label(s)} {len(v)}" for s, v in study.seeds().items()) or "none",
        table=study.table(columns),
        methods=table(["scheme", "method (val)"], [row[:2] for row in method_rows(study, [])]),
        rule=rule_section(study, Study(off) if off else None, columns),
        machines=study_machines(data),
    )
