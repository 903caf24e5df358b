"""docs/augmentation.md: each scheme trained with position augmentation against the same scheme without it, seed for
seed, under both regimes, from docs/augmentation.json (benchmarks/study.py with ``--pos-aug AUG --json
docs/augmentation.json``) and the runs without it (docs/study.json, then docs/frontier.json for the schemes the
study does not hold)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.common import fill, held_only, machines, table
from benchmarks.pages.frontier import COLUMNS, difference_text, measured
from benchmarks.pages.summary import Study, columns_of, head, label, labels, real_line, study_machines
from benchmarks.stats import holm, paired


def baseline(spec: str, baselines: list[Study]) -> Study | None:
    """The first baseline record (the runs without the training change) that holds ``spec``'s runs."""
    return next((s for s in baselines if spec in s.specs), None)


def chosen(spec: str, variant: Study, baselines: list[Study]) -> tuple[str, str]:
    """The method validation chose for ``spec`` with the training change and without it ("—" where a side has none)."""
    base = baseline(spec, baselines)
    without = base.choices.get(spec, {}).get("method", "—") if base else "—"
    return variant.choices.get(spec, {}).get("method", "—"), without


def swept_sizes(data: dict) -> set[int]:
    """The sizes a study swept every method at on test (its far sizes are tested with the chosen method only)."""
    return {int(s) for s in data.get("sizes", [])}


def chosen_only(data: dict) -> bool:
    """Whether a study tested each scheme's chosen method only (``--test-methods chosen``) at its swept sizes."""
    sweeps = [r.get("sweep", {}) for r in data.get("records", []) if r.get("split") == "test"]
    return any("method" in s and s.get("sizes") == data.get("sizes") for s in sweeps)


def unpaired_note(variant: Study, baselines: list[Study], data: dict) -> str:
    """Where the one-method table cannot hold a scheme: the runs with augmentation were tested under their own chosen
    method only, and validation chose another one without it."""
    if not chosen_only(data):
        return ""
    apart = [
        s for s in variant.specs if baseline(s, baselines) is not None and len(set(chosen(s, variant, baselines))) > 1
    ]
    if not apart:
        return ""
    return (
        f"\n\nThe runs with augmentation were tested under their own chosen method only (`--test-methods chosen`), "
        f"so a scheme whose validation sweeps chose different methods has no cell here: {labels(apart)}."
    )


def method_values(study: Study, spec: str, column: tuple[str, float], method: str) -> dict[int, float]:
    """Per seed, the test top-1 of ``spec`` in ``column`` under ``method`` (every method is swept below the far
    sizes, so this need not be the study's chosen one)."""
    return study.methods.get((spec, column[0], method, round(column[1] * study.train)), {})


def differences(variant: Study, baselines: list[Study], columns: list[tuple[str, float]] = COLUMNS,
                same_method: bool = False) -> dict:  # fmt: skip
    """(spec, column) -> the runs of a training change (position augmentation, several sizes, the position rule)
    minus the same scheme's runs without it, paired by seed, each side under its own validation-chosen method
    (``same_method``: both under the baseline's, which isolates what the training change does from a change of
    method); Holm-corrected over the table."""
    found = {}
    for spec in variant.specs:
        base = baseline(spec, baselines)
        method = base.choices.get(spec, {}).get("method") if base else None
        for column in columns if base else ():
            if same_method:
                x, y = method_values(variant, spec, column, method), method_values(base, spec, column, method)
            else:
                x, y = variant.values(spec, column), base.values(spec, column)
            shared = sorted(set(x) & set(y))
            if len(shared) >= 2:
                found[(spec, column)] = paired([x[k] for k in shared], [y[k] for k in shared])
    return dict(zip(found, holm(list(found.values())), strict=True))


def method_rows(variant: Study, baselines: list[Study]) -> list[list[str]]:
    """Per scheme: the method validation chose with the training change, and without it."""
    return [[label(s), *(f"`{m}`" for m in chosen(s, variant, baselines))] for s in variant.specs]


def baseline_machines(variant: Study, baselines: list[Study]) -> list[str]:
    """Where the other side of each difference (the runs without the training change) trained and was swept: one
    line per baseline record, machine and commit, naming the schemes it serves."""
    lines = []
    for base in baselines:
        specs = [s for s in variant.specs if baseline(s, baselines) is base]
        for what, key in (("training runs", "runs"), ("sweeps", "records")) if specs else ():
            lines += [f"- without it ({labels(specs)}), {what}: {m}"
                      for m in machines(held_only(base.data.get(key, []), specs))]  # fmt: skip
    return lines


def real_section(with_aug: dict | None, without: dict | None) -> str:
    """Fashion-MNIST at every size of its study: with minus without augmentation, paired by seed, each side under
    its own validation-chosen method, then both under the method chosen without it; each table Holm-corrected."""
    missing = ("Not measured yet: no test cell of docs/fashion_mnist_augmentation.json pairs with one of "
               "docs/fashion_mnist_study.json.")  # fmt: skip
    if not with_aug or not with_aug.get("records") or not without:
        return missing
    aug, base = Study(with_aug), Study(without)
    columns = measured(aug, columns_of(with_aug))
    own = differences(aug, [base], columns)
    if not own:
        return missing
    swept = [c for c in columns if c[1] * aug.train in swept_sizes(with_aug)]
    one = differences(aug, [base], swept, same_method=True)
    out = [f"Trained at {aug.train} px on Fashion-MNIST (docs/fashion_mnist_augmentation.json, "
           f"`{with_aug.get('command', '?')}`) "
           "against the same scheme and seed without augmentation (docs/fashion_mnist_study.json); the methods were "
           "chosen on Fashion-MNIST's own validation split, each side on its own runs:", "",
           table(["scheme", "method (val), with", "method (val), without"], method_rows(aug, [base])), "",
           aug.table(columns), "", "With minus without, each side under its own method (points):", "",
           table(["with − without (points)", *(head(*c) for c in columns)],
                 [[label(s), *(difference_text(own.get((s, c))) for c in columns)] for s in aug.specs])]  # fmt: skip
    if one:
        out += ["", "Both under the method chosen without augmentation (points):", "",
                table(["with − without, one method (points)", *(head(*c) for c in swept)],
                      [[label(s), *(difference_text(one.get((s, c))) for c in swept)] for s in aug.specs])]  # fmt: skip
    return "\n".join(out)


def render(
    data: dict, folder: Path, *plain: dict | None, fmnist: tuple[dict | None, dict | None] = (None, None)
) -> str:
    """docs/augmentation.md from docs/augmentation.json and the records without augmentation (``plain``, in order of
    preference: docs/study.json, docs/frontier.json); ``fmnist``: the Fashion-MNIST records with and without it
    (docs/fashion_mnist_augmentation.json, docs/fashion_mnist_study.json), a column where both hold a scheme."""
    aug = Study(data, fmnist=fmnist[0])
    bases = [Study(p, fmnist=fmnist[1]) for p in plain if p]
    columns = measured(aug, COLUMNS)
    diffs = differences(aug, bases, columns)
    rows = [[label(s), *(difference_text(diffs.get((s, c))) for c in columns)] for s in aug.specs]
    # one method on both sides: `shapes` only (another data set's methods are chosen on its own validation split), at
    # the sizes every method was swept at (the far sizes are tested with each side's chosen method only)
    shapes = [c for c in columns if not isinstance(c[1], str) and c[1] * aug.train in swept_sizes(data)]
    same = differences(aug, bases, shapes, same_method=True)
    same_rows = [[label(s), *(difference_text(same.get((s, c))) for c in shapes)] for s in aug.specs]
    return fill(
        "augmentation.md",
        aug=data.get("pos_aug") or "?",
        command=data["command"],
        seeds=", ".join(f"{label(s)} {len(v)}" for s, v in aug.seeds().items()) or "none",
        real=f" {real_line(aug, 'docs/fashion_mnist_augmentation.json')} Its runs without augmentation: "
        "docs/fashion_mnist_study.json."
        if ("fmnist", "native") in columns
        else "",
        table=aug.table(columns),
        methods=table(["scheme", "method (val), with", "method (val), without"], method_rows(aug, bases)),
        same=table(["with − without, one method (points)", *(head(*c) for c in shapes)], same_rows)
        + unpaired_note(aug, bases, data)
        if same
        else None,
        differences=table(["with − without (points)", *(head(*c) for c in columns)], rows)
        if diffs
        else "No scheme has two seeds both with and without augmentation yet.",
        fmnist=real_section(*fmnist),
        machines="\n".join([study_machines(data), *baseline_machines(aug, bases)]),
    )
