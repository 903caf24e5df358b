"""docs/augmentation.md: each scheme trained with position augmentation against the same scheme without it, seed for
seed, under both regimes, from docs/augmentation.json (benchmarks/study.py with ``--pos-aug AUG --json
docs/augmentation.json``) and the runs without it (docs/study.json, then docs/frontier.json for the schemes the
study does not hold)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.common import fill, table
from benchmarks.pages.frontier import COLUMNS, difference_text, measured
from benchmarks.pages.summary import Study, head, label, study_machines
from benchmarks.stats import holm, paired


def baseline(spec: str, plain: list[Study]) -> Study | None:
    """The first record without augmentation that holds ``spec``'s runs."""
    return next((s for s in plain if spec in s.specs), None)


def differences(aug: Study, plain: list[Study], columns: list[tuple[str, float]] = COLUMNS) -> dict:
    """(spec, column) -> with minus without, paired by seed, each scheme under its own validation-chosen method in
    each record; Holm-corrected over the page."""
    found = {}
    for spec in aug.specs:
        base = baseline(spec, plain)
        for column in columns if base else ():
            x, y = aug.values(spec, column), base.values(spec, column)
            shared = sorted(set(x) & set(y))
            if len(shared) >= 2:
                found[(spec, column)] = paired([x[k] for k in shared], [y[k] for k in shared])
    return dict(zip(found, holm(list(found.values())), strict=True))


def method_rows(aug: Study, plain: list[Study]) -> list[list[str]]:
    rows = []
    for spec in aug.specs:
        base = baseline(spec, plain)
        without = base.choices.get(spec, {}).get("method", "—") if base else "—"
        rows.append([label(spec), f"`{aug.choices.get(spec, {}).get('method', '—')}`", f"`{without}`"])
    return rows


def render(data: dict, folder: Path, *plain: dict | None) -> str:
    """docs/augmentation.md from docs/augmentation.json and the records without augmentation (``plain``, in order of
    preference: docs/study.json, docs/frontier.json)."""
    aug = Study(data)
    bases = [Study(p) for p in plain if p]
    columns = measured(aug, COLUMNS)
    diffs = differences(aug, bases, columns)
    rows = [[label(s), *(difference_text(diffs.get((s, c))) for c in columns)] for s in aug.specs]
    return fill(
        "augmentation.md",
        aug=data.get("pos_aug") or "?",
        command=data["command"],
        seeds=", ".join(f"{label(s)} {len(v)}" for s, v in aug.seeds().items()) or "none",
        table=aug.table(columns),
        methods=table(["scheme", "method (val), with", "method (val), without"], method_rows(aug, bases)),
        differences=table(["with − without (points)", *(head(*c) for c in columns)], rows)
        if diffs
        else "No scheme has two seeds both with and without augmentation yet.",
        machines=study_machines(data),
    )
