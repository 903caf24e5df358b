"""docs/fashion_mnist_study.md: the study's protocol on real data. Every main scheme trained on Fashion-MNIST below its
native size and tested up to it, so that a larger test size carries real detail (zoom) or only more background
(canvas); the methods chosen on its own validation split; and the position rule on against off, seed for seed. From
docs/fashion_mnist_study.json and docs/fashion_mnist_rule_off.json (benchmarks/study.py with ``--config
configs/fashion_mnist_study.yaml --img-size 16``, the second with ``--rule off``)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.pages.augmentation import differences, method_rows
from benchmarks.pages.common import anchors, fill, pct, signed, table
from benchmarks.pages.frontier import difference_text, measured
from benchmarks.pages.protocol import regime_split
from benchmarks.pages.summary import Study, columns_of, head, label, study_machines
from benchmarks.stats import holm, mean, paired


def upsampled_line(data: dict) -> str | None:
    """What the sizes above the native one are, where the study has any."""
    native = max(int(s) for s in data["sizes"])
    above = sorted(int(s) for s in data.get("far") or [] if int(s) > native)
    if not above:
        return None
    train = data["budget"]["img_size"]
    named = ", ".join(f"{s} px ({s / train:g}x)" for s in above)
    return (f"Above the native {native} px ({named}; `--far`, the chosen method only) a zoom test image is the native "
            "one upsampled, with no new detail: the sweep an upsampled photo gives, beside the sizes that carry real "
            "detail.")  # fmt: skip


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


def fall_section(study: Study, columns: list[tuple[str, float]], base: str = "none:patch") -> str:
    """Each scheme's fall from the training size to each column (1x minus the cell) minus the fall of ``base``, which
    has no position to extrapolate, seed for seed (the same seed on the same data), Holm-corrected over the table."""
    if not study.values(base, ("zoom", 1.0)):
        return f"Not measured yet: no runs of {label(base)}."
    start = {spec: study.values(spec, ("zoom", 1.0)) for spec in study.specs}
    found = {}
    for spec in (s for s in study.specs if s != base):
        for column in columns[1:]:
            x, y = study.values(spec, column), study.values(base, column)
            shared = sorted(set(x) & set(y) & set(start[spec]) & set(start[base]))
            if len(shared) >= 2:
                found[(spec, column)] = paired([start[spec][k] - x[k] for k in shared],
                                               [start[base][k] - y[k] for k in shared])  # fmt: skip
    if not found:
        return f"No scheme shares two seeds with {label(base)} yet."
    diffs = dict(zip(found, holm(list(found.values())), strict=True))
    specs = [s for s in study.specs if any((s, c) in diffs for c in columns)]
    rows = [[label(s), *(difference_text(diffs.get((s, c))) for c in columns[1:])] for s in specs]
    return table([f"fall minus {label(base)}'s (points)", *(head(*c) for c in columns[1:])], rows)


def dilate_cells(dilate: dict) -> dict[tuple[str, str, str, str, float], dict[int, float]]:
    """(spec, split, side, regime, factor) -> {seed: top-1} from docs/fashion_mnist_dilate.json; a record's side is
    "conv" for its sweep's first method (the chosen one), "dilate" for its second (the same with PEG dilated)."""
    out: dict[tuple[str, str, str, str, float], dict[int, float]] = defaultdict(dict)
    train = dilate["train_size"]
    for r in dilate.get("records", []):
        side = "conv" if r["method"] == r["sweep"]["methods"][0] else "dilate"
        out[(r["spec"], r["split"], side, r["regime"], r["resolution"] / train)][r["seed"]] = r["top1"]
    return out


def dilate_section(study: Study, dilate: dict | None, base: str = "none:patch") -> str:
    """PEG's kernel dilated by the grid's scale against the chosen method, paired by checkpoint, Holm over the table;
    the fall minus ``base``'s with the dilated kernel, as fall_section measures it; what validation would choose; and
    how the method-as-it-is side reproduces the study's own cells."""
    if not dilate or not dilate.get("records"):
        return "Not measured yet: no record of PEG dilated (docs/fashion_mnist_dilate.json)."
    got = dilate_cells(dilate)
    specs = [s for s in study.specs if any(k[0] == s for k in got)]
    columns = sorted({(k[3], k[4]) for k in got}, key=lambda c: (c[0] != "zoom", c[1]))
    gain, excess = {}, {}
    for spec in specs:
        start, none_start = study.values(spec, ("zoom", 1.0)), study.values(base, ("zoom", 1.0))
        for column in columns:
            x, y = got.get((spec, "test", "dilate", *column), {}), got.get((spec, "test", "conv", *column), {})
            shared = sorted(set(x) & set(y))
            if len(shared) >= 2:
                gain[(spec, column)] = paired([x[k] for k in shared], [y[k] for k in shared])
            z = study.values(base, column)
            both = sorted(set(x) & set(z) & set(start) & set(none_start))
            if column[0] == "zoom" and len(both) >= 2:
                excess[(spec, column)] = paired([start[k] - x[k] for k in both],
                                                [none_start[k] - z[k] for k in both])  # fmt: skip
    if not gain:
        return "No scheme with a `peg` part has two seeds measured both ways yet."
    gain = dict(zip(gain, holm(list(gain.values())), strict=True))
    excess = dict(zip(excess, holm(list(excess.values())), strict=True)) if excess else {}
    out = [table(["`dilate` − `conv` (points)", *(head(*c) for c in columns)],
                 [[label(s), *(difference_text(gain.get((s, c))) for c in columns)] for s in specs])]  # fmt: skip
    zoom = [c for c in columns if c[0] == "zoom"]
    if excess:
        out += ["", f"The fall minus {label(base)}'s (as in the section above) with the kernel dilated:", "",
                table([f"fall minus {label(base)}'s, dilated (points)", *(head(*c) for c in zoom)],
                      [[label(s), *(difference_text(excess.get((s, c))) for c in zoom)] for s in specs])]  # fmt: skip
    # the protocol's side: the mean over each regime's sizes on validation, dilated minus as it is
    choose = []
    for spec in specs:
        for regime in ("zoom", "canvas"):
            diffs = [mean(x[k] - y[k] for k in shared) for c in columns if c[0] == regime
                     if (shared := set(x := got.get((spec, "val", "dilate", *c), {}))
                         & set(y := got.get((spec, "val", "conv", *c), {})))]  # fmt: skip
            if diffs:
                choose.append(f"{label(spec)} under {regime}: {'`dilate`' if sum(diffs) > 0 else 'as it is'} "
                              f"({signed(mean(diffs))} points)")  # fmt: skip
    limit = next((r["sweep"]["limit"] for r in dilate["records"] if r["split"] == "val"), None)
    if choose:
        out += ["", f"On validation ({f'its first {limit:,}' if limit else 'all its'} images per cell), the mean "
                f"over each regime's sizes picks: {'; '.join(choose)}."]  # fmt: skip
    # the side as it is is the study's own chosen method on the same runs: it must give the study's cells
    seen = [abs(v - study.values(k[0], (k[3], k[4]))[seed]) for k, per in got.items()
            if k[1] == "test" and k[2] == "conv" for seed, v in per.items()
            if seed in study.values(k[0], (k[3], k[4]))]  # fmt: skip
    if seen:
        out += ["", f"The side as it is reproduces the study's own cells for these runs: {len(seen)} cells, largest "
                f"difference {100 * max(seen):.2f} points."]  # fmt: skip
    return "\n".join(out)


def parameters(budget: dict) -> int:
    """The parameter count of the study's model without position parameters (`none`), built as it trained."""
    from vitpos.model import create_model

    size = {k: budget[k] for k in ("img_size", "patch_size", "embed_dim", "depth", "num_heads")}
    model = create_model("none", num_classes=10, **size)
    return sum(p.numel() for p in model.parameters())


def ordering_section(study: Study) -> str:
    """The small-ViT ordering published on CIFAR-10 (docs/anchors.yaml, ``small_data_cifar``) held at the training size
    here: each published neighbour pair, the higher minus the lower, paired by seed and Holm-corrected together."""
    ref = anchors()["small_data_cifar"]
    published = sorted(ref["cifar10"], key=ref["cifar10"].get, reverse=True)
    specs = [f"{ref['schemes'][name]}:patch" for name in published]
    top1 = {spec: study.values(spec, ("zoom", 1.0)) for spec in specs}
    found = {}
    for a, b in zip(specs, specs[1:]):
        shared = sorted(set(top1[a]) & set(top1[b]))
        if len(shared) >= 2:
            found[(a, b)] = paired([top1[a][k] for k in shared], [top1[b][k] for k in shared])
    claim = " > ".join(f"{label(spec)} {ref['cifar10'][name]:g}" for name, spec in zip(published, specs, strict=True))
    budget = study.data["budget"]
    out = [f"{ref['source']} ({ref['setting']}) reports on CIFAR-10: {claim}. Here, at the training size with a "
           f"model of a matching size ({budget['embed_dim']} wide, {budget['depth']} blocks, "
           f"{budget['num_heads']} heads, {parameters(budget) / 1e6:.2f}M parameters against the published "
           f"{ref['params'] / 1e6:.2f}M), each published neighbour pair, the first minus the second, paired by seed, "
           "with the interval widened over these comparisons (Bonferroni) and verdicts by Holm:", ""]  # fmt: skip
    measured_order = sorted((s for s in specs if top1[s]), key=lambda s: -mean(top1[s].values()))
    for (a, b), d in zip(found, holm(list(found.values())), strict=True):
        verdict = {"above": "agrees", "below": "disagrees"}.get(d.verdict, "not separated (the runs cannot tell)")
        out.append(f"- {label(a)} above {label(b)}: {verdict}, {signed(d.diff)} [{signed(d.low)}, {signed(d.high)}] "
                   f"points (paired over {d.n_a} seeds, Holm p = {d.p_holm:.3g}).")  # fmt: skip
    if not found:
        out.append("- No published neighbour pair has two shared seeds yet.")
    if measured_order:
        means = [f"{label(s)} {pct(mean(top1[s].values()))}" for s in measured_order]
        out += ["", f"Measured order of the means here: {' > '.join(means)}."]
    return "\n".join(out)


def machines_text(data: dict, off: dict | None) -> str:
    """Where the study's runs and cells were made, then those of its rule-off ablation (``off``), one line each."""
    lines = study_machines(data)
    if off:
        lines += "".join(f"\n- rule off, {line[2:]}" for line in study_machines(off).splitlines())
    return lines


def render(data: dict, folder: Path, off: dict | None = None, dilate: dict | None = None) -> str:
    """docs/fashion_mnist_study.md from docs/fashion_mnist_study.json (``off``: the same study with the rule off;
    ``dilate``: docs/fashion_mnist_dilate.json, PEG's runs with the kernel dilated)."""
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
        upsampled=upsampled_line(data),
        methods=table(["scheme", "method (val)"], [row[:2] for row in method_rows(study, [])]),
        regimes=regime_split({"fashion_mnist_study": data}),
        fall=fall_section(study, columns),
        dilate=dilate_section(study, dilate),
        dilate_command=(dilate or {}).get("command", "python -m benchmarks.dilate"),
        rule=rule_section(study, Study(off) if off else None, columns),
        ordering=ordering_section(study),
        machines=machines_text(data, off),
    )
