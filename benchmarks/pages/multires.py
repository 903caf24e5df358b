"""docs/multires.md: the practical baseline, each scheme trained at several sizes (one per batch) against the same
scheme trained at 32 px alone, seed for seed, under both regimes, and how much of the gap to the training size each
column's difference closes; from docs/multires.json (benchmarks/study.py with ``--train-resolutions ... --json
docs/multires.json``) and docs/study.json."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.augmentation import differences, method_rows
from benchmarks.pages.common import cell, fill, machines, table
from benchmarks.pages.frontier import COLUMNS, difference_text, measured
from benchmarks.pages.summary import Study, head, label, study_machines

MIN_GAP = 0.02  # below 2 points at 1x there is no gap worth a share


def gap_closed(multi: Study, single: Study, spec: str, column: tuple[str, float]) -> str:
    """(multi − single) / (single at 1x − single), the means over the seeds all three cells share: the share of the
    single-size runs' loss at ``column`` that multi-resolution training wins back."""
    m, s, one = multi.values(spec, column), single.values(spec, column), single.values(spec, ("zoom", 1.0))
    shared = sorted(set(m) & set(s) & set(one))
    if not shared or column == ("zoom", 1.0):
        return "—"
    gap = sum(one[k] - s[k] for k in shared) / len(shared)
    if gap < MIN_GAP:
        return "no gap"
    return f"{100 * sum(m[k] - s[k] for k in shared) / len(shared) / gap:.0f} %"


def sizes_text(data: dict) -> str:
    return ", ".join(map(str, data.get("train_resolutions") or [])) or "?"


def ablation_table(studies: list[tuple[str, Study | None]], columns: list[tuple[str, float]]) -> str:
    """One row per scheme of the first study (the ablation) and training, each cell the mean over the seeds the
    ablation has (¹: one seed), for every study that has all of them there."""
    ablation = studies[0][1]
    rows = []
    for spec in ablation.specs:
        seeds = set(ablation.seeds()[spec])
        for name, study in studies:
            cells = []
            for c in columns:
                got = study.values(spec, c) if study else {}
                cells.append(cell([got[k] for k in sorted(seeds)]) if seeds <= set(got) else "—")
            rows.append([label(spec), name, *cells])
    return table(["scheme", "trained at", *(head(*c) for c in columns)], rows)


def render(data: dict, folder: Path, plain: dict | None, ablation: dict | None = None) -> str:
    """docs/multires.md from docs/multires.json and docs/study.json (``plain``: the runs at 32 px alone);
    ``ablation``, docs/multires_no16.json: runs trained at several sizes without the smallest."""
    multi = Study(data)
    single = Study(plain) if plain else None
    bases = [single] if single else []
    columns = measured(multi, COLUMNS)
    diffs = differences(multi, bases, columns)
    rows = [[label(s), *(difference_text(diffs.get((s, c))) for c in columns)] for s in multi.specs]
    gaps = [[label(s), *(gap_closed(multi, single, s, c) for c in columns[1:])] for s in multi.specs] if single else []
    least, patch = min(data.get("train_resolutions") or [0]), data["budget"]["patch_size"]
    smallest = f"{least} px ({least // patch} x {least // patch} patches)"
    if ablation:
        abl = Study(ablation)
        studies = [(f"{sizes_text(ablation)} px", abl), (f"{sizes_text(data)} px", multi), ("32 px alone", single)]
        seeds = "; ".join(f"{label(spec)} {', '.join(map(str, v))}" for spec, v in abl.seeds().items())
        without = (f"Trained at {sizes_text(ablation)} px (without {least} px), by `{ablation['command']}`; seeds: "
                   f"{seeds}.\n\n{ablation_table(studies, measured(abl, COLUMNS))}\n\n"
                   f"Where these runs were measured:\n\n{study_machines(ablation)}")  # fmt: skip
    else:
        without = "Not measured yet."
    return fill(
        "multires.md",
        sizes=sizes_text(data),
        smallest=smallest,
        without=without,
        command=data["command"],
        seeds=", ".join(f"{label(s)} {len(v)}" for s, v in multi.seeds().items()) or "none",
        table=multi.table(columns),
        methods=table(
            ["scheme", "method (val), several sizes", "method (val), 32 px alone"], method_rows(multi, bases)
        ),
        differences=table(["several sizes − 32 px alone (points)", *(head(*c) for c in columns)], rows)
        if diffs
        else "No scheme has two seeds both ways yet.",
        gaps=table(["share of the gap closed", *(head(*c) for c in columns[1:])], gaps) if diffs else None,
        machines=study_machines(data),
        baseline="; ".join(machines(plain.get("runs", []))) if plain else "none",
    )
