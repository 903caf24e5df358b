"""docs/summary.md, docs/summary.png and the README's table: one row per scheme, the study's answer at a glance."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.common import MAIN_RUNS
from benchmarks.pages import common
from benchmarks.pages.common import (
    BAG_CEILING,
    CHANCE,
    cell,
    fill,
    held_only,
    machines,
    merged,
    pct,
    per_round,
    same_checkpoint,
    signed,
    spread,
    table,
    tiny_model,
)
from benchmarks.stats import Difference, holm, mean, mean_ci, paired

# the columns: (regime, factor of the training size); 1x is zoom at the training size
# ("finetune", 2.0): tested at 2x after one epoch of fine-tuning there (the study's step 9); ("fmnist", "native"):
# Fashion-MNIST, trained below its native size and tested at it (docs/fashion_mnist_study.json)
COLUMNS = [("zoom", 1.0), ("zoom", 0.75), ("zoom", 1.5), ("zoom", 2.0), ("zoom", 4.0), ("canvas", 1.5),
           ("canvas", 2.0), ("canvas", 4.0), ("finetune", 2.0), ("fmnist", "native")]  # fmt: skip
README_COLUMNS = [
    ("zoom", 1.0),
    ("zoom", 2.0),
    ("zoom", 4.0),
    ("canvas", 2.0),
    ("canvas", 4.0),
    ("finetune", 2.0),
    ("fmnist", "native"),
]
GUIDE = [("zoom", 1.0), ("zoom", 1.5), ("zoom", 2.0), ("zoom", 4.0), ("canvas", 2.0), ("canvas", 4.0),
         ("finetune", 2.0), ("fmnist", "native")]  # fmt: skip


def label(spec: str) -> str:
    """POS:STEM as the pages name a scheme (common.label)."""
    return common.label(*spec.split(":"))


def head(regime: str, factor: float) -> str:
    if regime == "finetune":
        return f"fine-tuned {factor:g}x"
    if regime == "fmnist":
        return "Fashion-MNIST"
    return "1x" if factor == 1.0 else f"{regime} {factor:g}x"


def costs(cost: dict | None, train: int) -> dict[str, str]:
    """Per POS:STEM, the training step's time against `rope2d`'s at the training size, from a throughput record
    (benchmarks/throughput.py, every contender timed round-robin in one process): the median of per-round ratios
    (lowest-highest)."""
    grid = next((g for g in (cost or {}).get("grids", []) if g["img_size"] == train), None)
    if grid is None or "rope2d" not in grid["contenders"]:
        return {}
    rope = grid["contenders"]["rope2d"]["img_s"]
    out = {}
    for name, c in grid["contenders"].items():
        if not name.startswith("timm:"):
            spec = name if ":" in name else f"{name}:patch"
            out[spec] = "1" if name == "rope2d" else spread(per_round(rope, c["img_s"]), ".2f").replace(" to ", "-")
    return out


def cost_line(cost: dict | None) -> str:
    """Where the cost column comes from."""
    if not cost:
        return "Training cost: not measured (no docs/cost.json)."
    dims = cost["dims"]
    return (f"Training cost: one training step's time against `rope2d`'s at the training size, from "
            f"`{cost['command']}` ({cost['machine']['cpu']}, {cost['threads']} threads; model "
            f"{dims['embed_dim']} wide, {dims['depth']} blocks, {dims['num_heads']} heads, patch "
            f"{cost['patch_size']}): the median of per-round ratios, (lowest-highest round).")  # fmt: skip


def page_order(specs: set[str]) -> list[str]:
    """Schemes in the order every page lists them: the main runs in theirs, then the others by name."""
    return [s for s in MAIN_RUNS if s in specs] + sorted(specs - set(MAIN_RUNS))


def columns_of(data: dict) -> list[tuple[str, float]]:
    """The training size, then every other size under zoom and each larger one under canvas, as factors; the --far
    sizes (the chosen method only) last in each regime."""
    train = data["budget"]["img_size"]
    sizes = sorted(int(s) for s in data.get("sizes", []))
    far = sorted(int(s) for s in data.get("far") or [] if int(s) not in sizes)
    zoom = [("zoom", s / train) for s in sizes + far if s != train]
    return [("zoom", 1.0), *zoom, *(("canvas", s / train) for s in sizes + far if s > train)]


class Study:
    """The study's JSON read for the pages: per scheme and column, the test top-1 of each seed under the scheme's
    validation-chosen method."""

    def __init__(self, data: dict, cost: dict | None = None, fmnist: dict | None = None):
        self.data = data
        self.train = data["budget"]["img_size"]
        self.cost = costs(cost, self.train)
        self.choices = data.get("choices", {})
        self.cells: dict[tuple[str, str, float], dict[int, float]] = defaultdict(dict)
        self.methods: dict[tuple[str, str, str, int], dict[int, float]] = defaultdict(dict)  # every method, for plots
        self.controls: dict[tuple[str, str, float], dict[int, float]] = defaultdict(dict)
        for r in data.get("records", []):
            if r["split"] != "test":
                continue
            if r.get("control"):
                spec = f"{r['scheme']}:{r['stem']}"
                if r["method"] != self.choices.get(spec, {}).get("method"):
                    continue  # a control of an earlier choice
                self.controls[(spec, r["control"], r["resolution"] / self.train)][r["seed"]] = r["top1"]
                continue
            if r.get("pool", "all") != "all" or r.get("logit_scaling", "none") != "none":
                continue  # a control's evaluation without its name: never a cell
            spec = f"{r['scheme']}:{r['stem']}"
            factor = r["resolution"] / self.train if isinstance(r["resolution"], int) else None
            self.methods[(spec, r["regime"], r["method"], r["resolution"])][r["seed"]] = r["top1"]
            if factor is not None and spec in self.choices and r["method"] == self.choices[spec]["method"]:
                self.cells[(spec, r["regime"], factor)][r["seed"]] = r["top1"]
        for f in data.get("finetuned", []):
            self.cells[(f["spec"], "finetune", f["size"] / self.train)][f["seed"]] = f["top1"]
        present = {r["spec"] for r in data.get("runs", [])}
        self.specs = page_order(present)
        self.real = None  # (training size, native size) of the Fashion-MNIST study
        self.real_choices: dict = {}  # its methods, chosen on its own validation split
        if fmnist and fmnist.get("records"):
            real = Study(fmnist)
            # the largest of its --sizes: the data set's native size (a --far size above it is the image upsampled)
            native = max(int(s) for s in fmnist["sizes"])
            self.real, self.real_choices = (real.train, native), real.choices
            for spec in real.specs:
                self.cells[(spec, "fmnist", "native")] = real.values(spec, ("zoom", native / real.train))

    def values(self, spec: str, column: tuple[str, float]) -> dict[int, float]:
        return self.cells.get((spec, *column), {})

    def row(self, spec: str, columns: list[tuple[str, float]]) -> list[str]:
        method = self.choices.get(spec, {}).get("method")
        return [label(spec), *(cell(list(self.values(spec, c).values())) for c in columns[:1]),
                f"`{method}`" if method else "—",
                *(cell(list(self.values(spec, c).values())) for c in columns[1:]),
                *([self.cost.get(spec, "—")] if self.cost else [])]  # fmt: skip

    def table(self, columns: list[tuple[str, float]], specs: list[str] | None = None) -> str:
        """One row per scheme (``specs``, else every scheme of the record)."""
        heads = ["scheme", head(*columns[0]), "method (val)", *(head(*c) for c in columns[1:])]
        heads += ["training cost (x `rope2d`)"] if self.cost else []
        return table(heads, [self.row(s, columns) for s in (self.specs if specs is None else specs)])

    def seeds(self) -> dict[str, list[int]]:
        return {s: sorted(r["seed"] for r in self.data["runs"] if r["spec"] == s) for s in self.specs}

    def tuned(self) -> dict[str, set[int]]:
        """The seeds fine-tuned per scheme (at any size), for the schemes that have any."""
        out: dict[str, set[int]] = defaultdict(set)
        for f in self.data.get("finetuned", []):
            out[f["spec"]].add(f["seed"])
        return dict(out)


def guide(study: Study) -> list[str]:
    """At most 8 lines, each the best scheme of one column with its margin over the runner-up (paired by seed,
    Holm-corrected over the decision guide's comparisons)."""
    picks, diffs = [], []
    for column in GUIDE:
        cells = {s: v for s in study.specs if (v := study.values(s, column))}
        # a one-seed cell is ranked only where no scheme has more: it has no interval to be judged by
        cells = {s: v for s, v in cells.items() if len(v) >= 2} or cells
        means = {s: mean(v.values()) for s, v in cells.items()}
        if not means:
            continue
        best, *rest = sorted(means, key=lambda s: -means[s])
        runner = rest[0] if rest else None
        d = None
        if runner is not None:
            shared = sorted(set(study.values(best, column)) & set(study.values(runner, column)))
            if len(shared) >= 2:
                d = paired([study.values(best, column)[k] for k in shared],
                           [study.values(runner, column)[k] for k in shared])  # fmt: skip
        picks.append((column, best, runner))
        diffs.append(d)
    corrected = iter(holm([d for d in diffs if d is not None]))
    diffs = [next(corrected) if d is not None else None for d in diffs]
    lines = []
    for (column, best, runner), d in zip(picks, diffs, strict=True):
        if column[0] == "fmnist":
            what = (
                f"on real data (Fashion-MNIST trained at {study.real[0]} px, served at its native {study.real[1]} px)"
            )
        elif column[0] == "finetune":
            what = f"to serve {column[1]:g}x after one epoch of fine-tuning there"
        else:
            what = "at the training size" if column[1] == 1.0 else f"to serve {column[1]:g}x ({column[0]}) unchanged"
        method = (study.real_choices if column[0] == "fmnist" else study.choices).get(best, {}).get("method", "?")
        score = cell(list(study.values(best, column).values()))
        line = f"- **{what[0].upper() + what[1:]}**: {label(best)} with `{method}`, {score} %"
        if runner is None:
            lines.append(line + " (the only scheme measured).")
        elif d is None:
            lines.append(line + f"; next {label(runner)}: fewer than two shared seeds, no verdict.")
        else:
            verdict = "above it" if d.verdict == "above" else "not separated from it (the runs cannot tell)"
            lines.append(
                line + f"; {verdict}: {signed(d.diff)} [{signed(d.low)}, {signed(d.high)}] points over "
                f"{label(runner)} (paired over {d.n_a} seeds, Holm p = {d.p_holm:.3g})."
            )
    return lines[:8]


CONTROL_NAMES = {"scene": "pool the scene only", "logn": "log-n logits", "offgrid": "off the patch grid"}


def controls(study: Study, factor: float = 2.0) -> str:
    """Per scheme at canvas ``factor``: the chosen method as measured, each control's paired difference from it (the
    same checkpoints evaluated twice), and how far below 1x the log-n control still is (what attention spread over
    more keys does not explain), all Holm-corrected over the table."""
    rows, diffs, where = [], [], []
    for spec in study.specs:
        if not any(study.controls.get((spec, name, factor)) for name in CONTROL_NAMES):
            continue  # no control swept for it (the other chosen schemes' study sweeps none)
        base = study.values(spec, ("canvas", factor))
        row = [label(spec), cell(list(base.values()))]
        one = study.values(spec, ("zoom", 1.0))
        logn = study.controls.get((spec, "logn", factor), {})
        for got, against in [*((study.controls.get((spec, n, factor), {}), base) for n in CONTROL_NAMES), (logn, one)]:
            shared = sorted(set(against) & set(got))
            if len(shared) >= 2:
                diffs.append(paired([got[k] for k in shared], [against[k] for k in shared]))
                where.append((len(rows), len(row)))
                row.append("")
            else:
                row.append(f"{signed(got[shared[0]] - against[shared[0]])}¹" if shared else "—")
        rows.append(row)
    by_column: dict[int, list[tuple[str, Difference]]] = defaultdict(list)
    for (i, j), d in zip(where, holm(diffs), strict=True):
        mark = "" if d.verdict == "not separated" else " *"
        rows[i][j] = f"{signed(d.diff)} [{signed(d.low)}, {signed(d.high)}]{mark}"
        by_column[j].append((rows[i][0], d))
    if not any(c not in ("—", "") for r in rows for c in r[2:]):
        return "No control is measured yet."
    heads = ["scheme", f"canvas {factor:g}x", *(f"{n} (points)" for n in CONTROL_NAMES.values()),
             "log-n logits against 1x (points)"]  # fmt: skip
    return table(heads, rows) + controls_reading(by_column)


def controls_reading(by_column: dict[int, list[tuple[str, Difference]]]) -> str:
    """The controls table read across its rows: per control, the schemes it separates from the canvas cell and the
    range of their differences; then the range of what log-n logits leave of the fall from 1x."""
    parts = []
    for j, name in enumerate(CONTROL_NAMES.values(), start=2):
        cells = by_column.get(j, [])
        if not cells:
            continue
        apart = [d.diff for _, d in cells if d.verdict != "not separated"]
        span_ = f" ({signed(min(apart))} to {signed(max(apart))} points)" if len(apart) > 1 else (
            f" ({signed(apart[0])} points)" if apart else "")  # fmt: skip
        parts.append(f"{name} for {len(apart)} of {len(cells)}{span_}")
    if not parts:
        return ""
    text = f"\n\nRead across the rows: separated from the canvas cell, {'; '.join(parts)}."
    if left := by_column.get(2 + len(CONTROL_NAMES)):
        least, most = max(left, key=lambda c: c[1].diff), min(left, key=lambda c: c[1].diff)
        text += (f" What log-n logits leave of the fall from 1x runs from {signed(least[1].diff)} points ({least[0]}) "
                 f"to {signed(most[1].diff)} ({most[0]}).")  # fmt: skip
    return text


ENTROPY_COLUMNS = [("zoom", 1.0), ("zoom", 2.0), ("zoom", 4.0), ("canvas", 2.0), ("canvas", 4.0)]


def entropy_table(study: Study) -> str:
    """Per scheme and column: the attention entropy as a fraction of uniform (entropy / log N, averaged over blocks,
    heads and seeds; 1 = attention spread evenly over every key), with the chosen method."""
    frac: dict[tuple[str, str, float], list[float]] = defaultdict(list)
    for e in study.data.get("entropy", []):
        values = [v for block in e["entropy"] for v in block]
        frac[(e["spec"], e["regime"], e["resolution"] / study.train)].append(mean(values) / e["log_n"])
    if not frac:
        return "Not measured yet."
    measured = {spec for spec, *_ in frac}  # a scheme whose study measured none has no row
    rows = [[label(s), *(f"{mean(v):.2f}" if (v := frac.get((s, *c))) else "—" for c in ENTROPY_COLUMNS)]
            for s in study.specs if s in measured]  # fmt: skip
    return table(["scheme", *(head(*c) for c in ENTROPY_COLUMNS)], rows)


def shuffle_table(study: Study) -> str:
    """Per scheme: test top-1 at the training size with the patches in place and permuted (one fixed permutation),
    and the drop with its 95 % t-interval over seeds (paired: the same checkpoint, one image set)."""
    by: dict[str, list[dict]] = defaultdict(list)
    for e in study.data.get("shuffle", []):
        by[e["spec"]].append(e)
    if not by:
        return "Not measured yet."
    rows = []
    for s in (s for s in study.specs if s in by):
        drops = [e["drop"] for e in by[s]]
        m, lo, hi = mean_ci(drops)
        drop = signed(m) if len(drops) == 1 else f"{signed(m)} [{signed(lo)}, {signed(hi)}]"
        rows.append([label(s), cell([e["top1"] for e in by[s]]), cell([e["top1_shuffled"] for e in by[s]]), drop,
                     str(len(drops))])  # fmt: skip
    return table(["scheme", "in place", "patches shuffled", "drop (points)", "seeds"], rows)


def ceiling_noise(study: Study) -> str:
    """How far a blind model's top-1 on the test split strays from the ceiling by chance (95 %, binomial)."""
    n = study.data["budget"].get("test_size")
    return f"{100 * 1.96 * (BAG_CEILING * (1 - BAG_CEILING) / n) ** 0.5:.1f}" if n else "?"


RULE_KEYS = ("pos_lr_scale", "pos_weight_decay", "pos_decay_to", "pos_lr_warmup_epochs")


def by_run(record: dict) -> dict[tuple, dict]:
    """A record's runs by (POS:STEM, seed, position rule): a rule study names each run's rule, a study its budget's
    one. Runs with scheme options are left out: no study runs them."""
    budget = record.get("budget", {})
    return {(r["spec"], r["seed"], *(r.get(k, budget.get(f"rule_{k}")) for k in RULE_KEYS)): r
            for r in record.get("runs", []) if not r.get("pos_kwargs") and "test_top1" in r}  # fmt: skip


def reruns(pairs: list[tuple[str, dict | None, str, dict | None]]) -> str:
    """Each run two records both hold (same scheme, seed and rule), for each (name, record, other name, other record)
    of ``pairs``: both test top-1 (the best-validation checkpoint, as each run reports it) and the machine and commit
    each trained on. A run both records hold by one checkpoint (a study that reuses another's runs) is no rerun: such
    runs are counted in a line, not set side by side."""

    def where(r: dict) -> str:
        return f"{r.get('hardware', 'not recorded')}, {r.get('commit', 'no commit recorded')}"

    rows, shared = [], []
    for name, first, other_name, second in pairs:
        theirs = by_run(second or {})
        reused = 0
        for key, r in sorted(by_run(first or {}).items(), key=lambda kv: kv[0][:2]):
            if (o := theirs.get(key)) is None:
                continue
            if same_checkpoint(r, o):
                reused += 1
                continue
            rows.append([label(r["spec"]), str(r["seed"]), f"{pct(r['test_top1'])} ({name})",
                         f"{pct(o['test_top1'])} ({other_name})", signed(o["test_top1"] - r["test_top1"]),
                         where(r), where(o)])  # fmt: skip
        if reused:
            many = reused > 1
            shared.append(f"{reused} run{'s' * many} of the {name} record {'are' if many else 'is'} the {other_name}"
                          f" record's own (the same checkpoint{'s' * many}): no rerun to compare.")  # fmt: skip
    if not rows and not shared:
        return "No run is in two records."
    heads = ["scheme", "seed", "test top-1 (record)", "again (record)", "difference (points)",
             "first: machine, commit", "again: machine, commit"]  # fmt: skip
    return "\n\n".join([table(heads, rows)] * bool(rows) + [" ".join(shared)] * bool(shared))


def same_kind_reruns(reran: dict | None, current: dict[str, dict | None] | None = None) -> str:
    """docs/rerun.json (benchmarks/rerun.py): each recorded run trained again by its study's flags on the same kind
    of machine, its test top-1 beside the record's, the largest difference of their last weights, and a verdict line
    counting those that agree exactly; where reruns are the runs a record of ``current`` (its path: the record, e.g.
    docs/study.json) now holds (the same checkpoints), a line says so: what they are set against is its earlier one."""
    same = [r for r in (reran or {}).get("reruns", []) if r["recorded"].get("hardware") == r["rerun"].get("hardware")]
    if not same:
        return "No run has been trained again on the same kind of machine yet (`python -m benchmarks.rerun`)."

    def weights(w: float | None) -> str:
        return "—" if w is None else "0 (bit for bit)" if w == 0 else f"{w:.2g}"

    def configs(d: list[str] | None) -> str:
        return "—" if d is None else ", ".join(f"`{k}`" for k in d) or "none"

    def record(r: dict) -> str:  # the record's path, without the revision it was read at (REV:PATH)
        return r.get("study", "?").rpartition(":")[2]

    rows = []
    for r in sorted(same, key=lambda r: (record(r), r["spec"], r["seed"])):
        old, new = r["recorded"], r["rerun"]
        val = [x.get("best_val_top1") for x in (old, new)]
        rows.append([record(r), label(r["spec"]), str(r["seed"]), f"{pct(old['test_top1'])} ({old.get('commit', '?')})",
                     f"{pct(new['test_top1'])} ({new.get('commit', '?')})", signed(new["test_top1"] - old["test_top1"]),
                     "—" if None in val else signed(val[1] - val[0]), configs(r.get("config_differences")),
                     weights(r.get("max_weight_difference")), new.get("hardware", "?")])  # fmt: skip
    gaps = [abs(r["rerun"]["test_top1"] - r["recorded"]["test_top1"]) for r in same]
    compared = [r["max_weight_difference"] for r in same if r.get("max_weight_difference") is not None]
    exact = gaps.count(0.0)
    verdict = (f"{exact} of {len(same)} reruns on the same kind of machine give the recorded test top-1 exactly, and "
               f"{compared.count(0.0)} of the {len(compared)} whose recorded checkpoint is still at hand end on the "
               "same weights bit for bit")  # fmt: skip
    verdict += "." if exact == len(same) else f"; the largest difference is {100 * max(gaps):.1f} points."
    commands = list(dict.fromkeys(r.get("command") or reran["command"] for r in same))
    heads = ["record", "scheme", "seed", "recorded test top-1 (commit)", "rerun (commit)", "test difference (points)",
             "best validation difference (points)", "config fields set apart", "largest weight difference",
             "machine"]  # fmt: skip
    made = "; ".join(f"`{c}`" for c in commands)
    for name, record in (current or {}).items():
        held = {r.get("ckpt_sha256") for r in (record or {}).get("runs", [])} - {None}
        own = [r for r in same if r["rerun"].get("ckpt_sha256") in held]
        if own:
            at = ", ".join(sorted({r["rerun"].get("commit", "?") for r in own}))
            before = ", ".join(sorted({r["recorded"].get("commit", "?") for r in own}))
            one = len(own) == 1
            verdict += (f" {len(own)} of these reruns (commit {at}) {'is a run' if one else 'are the runs'} {name} "
                        f"holds now: the record {'it is' if one else 'they are'} set against is its earlier one "
                        f"(commit {before}).")  # fmt: skip
    return f"{verdict} Made by {made}.\n\n{table(heads, rows)}"


def hindsight_best(study: Study, spec: str) -> str | None:
    """The method with the highest mean test top-1 over the cells every method of ``spec`` has (sizes other than the
    training size, both regimes: the choice's own pooling, read on test): what the validation choice is set against
    in the figure, never a choice."""
    cells: dict[str, dict[tuple[str, int], float]] = {}
    for (s, g, m, size), v in study.methods.items():
        if s == spec and isinstance(size, int) and size != study.train and v:
            cells.setdefault(m, {})[(g, size)] = mean(v.values())
    shared = set.intersection(*(set(c) for c in cells.values())) if cells else set()
    if not shared:
        return None
    return max(cells, key=lambda m: (sum(cells[m][k] for k in shared), m))


def hindsight_line(study: Study) -> str:
    """Under the figure: for how many schemes the method best on test in hindsight (same pooling) is the one
    validation chose, and which one it is where not."""
    pairs = {s: (study.choices.get(s, {}).get("method"), hindsight_best(study, s)) for s in study.specs}
    pairs = {
        s: p for s, p in pairs.items() if None not in p and len({m for (x, _, m, _) in study.methods if x == s}) > 1
    }
    if not pairs:
        return "No scheme has two methods swept on test to set the choice against."
    apart = [f"{label(s)} (`{b}` over the chosen `{c}`)" for s, (c, b) in pairs.items() if b != c]
    same = len(pairs) - len(apart)
    out = (f"Read on test with the choice's own pooling (every swept size but the training size, both regimes), the "
           f"method validation chose is also the best in hindsight for {same} of the {len(pairs)} schemes with more "
           "than one method")  # fmt: skip
    return out + (f"; another is best for {', '.join(apart)} (drawn in purple)." if apart else ".")


def plot(study: Study, png: Path) -> None:
    """Small multiples: one panel per scheme, top-1 against the size factor, the validation-chosen method in colour,
    the method best on test in hindsight in a second colour where it is another, every other method of the scheme in
    grey (zoom solid, canvas dashed), chance and the bag-of-patches ceiling
    marked; the legend below the panels, never over the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(study.specs)
    cols = min(3, max(n, 1))
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows + 0.7), sharex=True, sharey=True,
                             squeeze=False)  # fmt: skip
    apart = False  # whether any panel draws a method best in hindsight other than the chosen one
    for ax, spec in zip(axes.flat, study.specs, strict=False):
        chosen = study.choices.get(spec, {}).get("method")
        best = hindsight_best(study, spec)
        apart |= best not in (None, chosen)
        methods = sorted({m for (s, _, m, _) in study.methods if s == spec},
                         key=lambda m: (m == chosen, m == best, m))  # fmt: skip
        for method in methods:  # the chosen one last, on top
            for regime, style in (("zoom", "-"), ("canvas", "--")):
                pts = sorted((size / study.train, mean(v.values()))
                             for (s, g, m, size), v in study.methods.items()
                             if (s, g, m) == (spec, regime, method) and isinstance(size, int))  # fmt: skip
                if pts:
                    colour, width = (("tab:orange", 2.0) if method == chosen else ("tab:purple", 1.5)
                                     if method == best else ("0.65", 1.0))  # fmt: skip
                    ax.plot(*zip(*pts), style, color=colour, linewidth=width, marker="o", markersize=3)
        tuned = [(factor, mean(v.values())) for (s, g, factor), v in study.cells.items()
                 if (s, g) == (spec, "finetune") and v]  # fmt: skip
        if tuned:
            ax.plot(*zip(*tuned), linestyle="none", marker="*", markersize=9, color="tab:green")
        ax.axhline(CHANCE, color="tab:red", linestyle=":", linewidth=1)
        ax.axhline(BAG_CEILING, color="tab:blue", linestyle="-.", linewidth=1)
        ax.set_title(spec.replace(":patch", "").replace(":conv", " (conv stem)"), fontsize=9)
        ax.set_xscale("log", base=2)
        factors = sorted(c[1] for c in COLUMNS if c[0] == "zoom")
        ax.set_xticks(factors, [f"{f:g}x" for f in factors])
        ax.minorticks_off()
        ax.set_ylim(0, 1.02)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color="tab:orange", linewidth=2, label="validation-chosen method"),
               *[plt.Line2D([], [], color="tab:purple", linewidth=1.5, label="best on test in hindsight")] * apart,
               plt.Line2D([], [], color="0.65", label="the scheme's other methods"),
               plt.Line2D([], [], color="black", linestyle="-", label="zoom"),
               plt.Line2D([], [], color="black", linestyle="--", label="canvas"),
               plt.Line2D([], [], color="tab:green", linestyle="none", marker="*", markersize=9,
                          label="fine-tuned there (one epoch)"),
               plt.Line2D([], [], color="tab:red", linestyle=":", label="chance (12.5 %)"),
               plt.Line2D([], [], color="tab:blue", linestyle="-.", label="bag-of-patches ceiling (25 %)")]  # fmt: skip
    for ax in axes[-1]:
        ax.set_xlabel("test size / training size", fontsize=8)
    fig.supylabel("test top-1", fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(png, dpi=110)
    plt.close(fig)


def study_machines(data: dict, others: dict | None = None, held: list[str] = ()) -> str:
    """Where a study's runs trained, its cells were swept and its entropy measured (and, where given, those of
    ``others``, the second table's record, that belong to its rows ``held``): one line per distinct machine, device,
    commit, torch and thread count."""
    parts = (
        ("training runs", "runs"),
        ("sweeps", "records"),
        ("attention entropy", "entropy"),
        ("fine-tuning runs", "finetuned"),
    )
    lines = [f"- {what}: {m}" for what, key in parts for m in machines(data.get(key, []))]
    if others:
        lines += [f"- second table, {what}: {m}" for what, key in parts
                  for m in machines(held_only(others.get(key, []), held))]  # fmt: skip
    return "\n".join(lines) or "- none"


def rebuilt_start(spec: str) -> str | None:
    """The transfer method that serves a new grid as a fine-tuning run there starts, for a run that rebuilt a scheme
    with nothing grid-sized to carry for its own grid (its record names no ``start``: it did not keep the scheme's
    training grid), which need not be what the chosen method served. None where the scheme does not serve a new grid
    by its method alone (``PosScheme.serves_by_method``: one method, or a grid-sized state the method carries)."""
    import torch

    from vitpos.pos.base import PosScheme
    from vitpos.pretrained import transfer_weights

    old = tiny_model(spec, img_size=16).eval()
    if not old.pos.serves_by_method:
        return None
    new = tiny_model(spec, img_size=32).eval()
    transfer_weights(old, new)

    def served(scheme: PosScheme) -> list:
        """Everything the scheme gives the model on the new grid: its token term and each block's attention terms."""
        with torch.no_grad():
            out = [scheme.tokens(torch.zeros(1, new.grid[0] * new.grid[1], new.head.in_features), new.grid)]
            for a in scheme.attn_pos(new.grid):
                out += [t for t in (a.rope, a.bias, a.rotation, a.mix) if t is not None]
                out.append(torch.as_tensor(a.logit_scale, dtype=torch.float32))
        return out

    start = served(new.pos)
    for method in old.pos.methods:
        old.pos.method = method
        got = served(old.pos)
        if len(got) == len(start) and all(g.shape == t.shape and torch.allclose(g, t) for g, t in zip(got, start)):
            return method
    return None


def coverage(study: Study) -> str:
    """Which seeds each scheme has of those the study asks for, which were swept on test, and at which sizes."""
    seeds = study.seeds()
    want = study.data.get("seeds", [])
    parts = [f"{label(s)} {len(v)}" for s, v in seeds.items()]
    swept = {r["seed"] for r in study.data.get("records", []) if r["split"] == "test"}
    # the last command's --seeds (a pass that fine-tunes some seeds asks for fewer than the runs hold)
    of = f" of the {len(want)} the study asks for" if want and all(len(v) <= len(want) for v in seeds.values()) else ""
    far = study.data.get("far")
    far = f"; {', '.join(far)} px on test with the chosen method only" if far else ""
    tuned = study.data.get("finetune")
    recipe = " ".join(study.data.get("finetune_recipe", []))
    done = study.tuned()
    starts: dict[str, set[str | None]] = defaultdict(set)  # the methods each scheme's fine-tuning runs start from
    for f in study.data.get("finetuned", []):
        starts[f["spec"]].add(f.get("start"))
    by_start: dict[str, list[str]] = defaultdict(list)  # a start other than the chosen method -> its schemes
    for s in study.specs:
        for m in {rebuilt_start(s) if m is None else m for m in starts[s]}:
            if m is not None and m != study.choices.get(s, {}).get("method"):
                by_start[m].append(label(s))
    fresh = [f"{' and '.join(names)} start{'s' if len(names) == 1 else ''} as `{m}` serves the new grid"
             for m, names in by_start.items()]  # fmt: skip
    fresh_text = (" A run that rebuilt a scheme with nothing grid-sized to carry for the new grid (its record names no "
                  f"start) does not start from the method validation chose: {'; '.join(fresh)}." if fresh else
                  " Each epoch starts where the chosen method serves the new grid: a scheme with nothing grid-sized "
                  "keeps its training grid and serves the new one by that method (`--pos-grid`), a grid-sized table "
                  "is carried there by it.")  # fmt: skip
    tuned = (f" Fine-tuned: one more epoch at {', '.join(tuned)} px from each run's last checkpoint (`train.py "
             f"--init-from ... {recipe}`), then tested there; seeds fine-tuned per scheme: "
             f"{', '.join(f'{label(s)} {len(done[s])}' for s in study.specs if s in done) or 'none'}.{fresh_text}"
             if tuned else "")  # fmt: skip
    real = f" {real_line(study)}" if study.real else ""
    return (
        f"Seeds trained per scheme{of}: {', '.join(parts) or 'none'}; seeds swept on test: "
        f"{', '.join(map(str, sorted(swept))) or 'none'}. Sizes swept: {', '.join(study.data.get('sizes', []))} px"
        f"{far}.{tuned}{real}"
    )


def real_line(study: Study, record: str = "docs/fashion_mnist_study.json") -> str:
    """How the Fashion-MNIST column was made (by ``record``), with its seeds per scheme (of the schemes ``study`` has
    rows for)."""
    counts = {s: len(v) for s in study.specs if (v := study.values(s, ("fmnist", "native")))}
    seeds = ", ".join(f"{label(s)} {n}" for s, n in counts.items())
    return (f"Fashion-MNIST: trained at {study.real[0]} px (downsampled), tested at its native {study.real[1]} px "
            "(zoom: the larger size carries real detail) with the method its own validation split chose "
            f"({record}); seeds per scheme: {seeds or 'none'}. How much of each scheme's fall there is position: "
            "[each fall against that of `none`](fashion_mnist_study.md#how-much-of-the-fall-is-position).")  # fmt: skip


def span(counts: list[int]) -> str:
    """ "5" where every count is 5, "3-5" where they range."""
    return "none" if not counts else str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def in_brief(study: Study) -> str:
    """The README's short form of :func:`coverage`: seeds per scheme, and how the columns beyond the swept sizes were
    made, each with its seeds."""
    parts = [f"seeds per scheme: {span([len(v) for v in study.seeds().values() if v])}"]
    if far := study.data.get("far"):
        parts.append(f"4x: {', '.join(far)} px, the chosen method only")
    if tuned := study.tuned():
        sizes = sorted({str(f["size"]) for f in study.data["finetuned"]})
        parts.append(f"fine-tuned: one epoch at {', '.join(sizes)} px, {span([len(v) for v in tuned.values()])} seeds")
    if study.real:
        counts = [len(v) for s in study.specs if (v := study.values(s, ("fmnist", "native")))]
        parts.append(f"Fashion-MNIST: trained at {study.real[0]} px, tested at its native {study.real[1]} px, "
                     f"{span(counts)} seeds")  # fmt: skip
    return "; ".join(parts)


def duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def study_command(command: str, runs: list[str], seeds: list[int]) -> str:
    """A study's recorded ``command`` for ``runs`` at ``seeds``, training what it lacks (no ``--no-train``)."""
    words = command.split()
    keep, skip = [], False
    for w in words:
        if w in ("--runs", "--seeds"):
            skip = True
            continue
        if skip and not w.startswith("--"):
            continue
        skip = False
        if w != "--no-train":
            keep.append(w)
    at = keep.index("benchmarks.study") + 1
    return " ".join(keep[:at] + ["--runs", *runs, "--seeds", *map(str, seeds)] + keep[at:])


def labels(specs: list[str]) -> str:
    return ", ".join(label(s) for s in specs)


def not_measured(study: Study, fmnist: dict | None) -> str:
    """What the tables leave out (a row's —, or fewer Fashion-MNIST seeds than the study has on `shapes`), each with
    the trainings it needs, their time from the recorded runs of that column on the machine they trained on, and the
    command that would measure it."""
    lines = []
    tuned = study.tuned()
    if tuned and (lacking := [s for s in study.specs if s not in tuned]):
        n = max(len(study.seeds()[s]) for s in lacking)
        lines.append(f"- **Fine-tuned 2x for {labels(lacking)}**: {len(lacking) * n} one-epoch runs, the study's "
                     "command with `--finetune` at the training size's double (step 9).")  # fmt: skip
    if fmnist and fmnist.get("runs") and study.real:
        secs = [r["train_seconds"] for r in fmnist["runs"] if "train_seconds" in r]
        each = sum(secs) / len(secs) if secs else 0.0
        where = sorted({r.get("hardware", "?") for r in fmnist["runs"]})
        have = {s: len(study.values(s, ("fmnist", "native"))) for s in study.specs}
        seeds = max(have.values())

        def rerun(specs: list[str], n: int) -> str:
            cmd = fmnist.get("command")
            return f": `{study_command(cmd, specs, list(range(n)))}`" if cmd else ""

        if lacking := [s for s, n in have.items() if n == 0]:
            runs = len(lacking) * seeds
            lines.append(
                f"- **Fashion-MNIST for {labels(lacking)}**: {runs} trainings ({seeds} seeds each, as the "
                f"column's other rows), about {duration(runs * each)} of training on {', '.join(where)} (its runs "
                f"took {duration(each)} each){rerun(lacking, seeds)}."
            )
        want = len(study.data.get("seeds", []))
        if (short := [s for s, n in have.items() if 0 < n < want]) and want:
            runs = sum(want - have[s] for s in short)
            lines.append(
                f"- **Fashion-MNIST at the {want} seeds `shapes` has**: {labels(short)} have "
                f"{span([have[s] for s in short])}; {runs} more training{'s' * (runs != 1)}, about "
                f"{duration(runs * each)} on "
                f"{', '.join(where)}{rerun(short, want)}."
            )
    return "\n".join(lines) or "Every row has every column at every seed the study asks for."


def page_missing(missing: list[str], gaps: bool = False, link: str = "") -> str:
    """Which columns have no cell at all; ``gaps``: some rows lack a cell (—) in a swept column, listed under the
    summary's "Not measured yet" section (``link``: the path to the summary page from where this is read)."""
    if missing:
        return "Columns not swept yet: " + ", ".join(missing) + "."
    where = f"[not measured yet]({link}#not-measured-yet-and-what-it-would-take)"
    return f"Every column is swept; the rows without a cell (—) are listed under {where}." if gaps else (
        "Every column is swept.")  # fmt: skip


def commits(*records: list[dict]) -> set[str]:
    return {r.get("commit", "?") for recs in records for r in recs}


def made_apart(others: dict, held: list[str], data: dict) -> bool:
    """Whether the second table's rows (``held``, from ``others``) were trained or swept at a commit the first
    table's record ``data`` does not share exactly."""
    theirs = commits(held_only(others.get("runs", []), held), held_only(others.get("records", []), held))
    return theirs != commits(data.get("runs", []), data.get("records", []))


def chosen_only(record: dict, specs: list[str]) -> bool:
    """Whether ``record`` swept test with one method per scheme of ``specs`` (``--test-methods chosen``)."""
    cells = [r for r in held_only(record.get("records", []), specs) if r["split"] == "test"]
    return all(len({r["method"] for r in cells if f"{r['scheme']}:{r['stem']}" == spec}) <= 1 for spec in specs)


def real_words(held: list[str], real: list[str]) -> str:
    """Which of the second table's rows ``held`` have a Fashion-MNIST cell (``real``), and where it comes from."""
    if not real:
        return "they are not trained on Fashion-MNIST (—)"
    source = "from docs/fashion_mnist_study.json, trained and swept with the six there"
    if len(real) == len(held):
        return f"their Fashion-MNIST cells come {source}"
    return f"Fashion-MNIST cells, {source}: {', '.join(map(label, real))} only (—: the others)"


def chosen_others(others: dict, held: list[str], rowless: list[str] = (), data: dict | None = None,
                  real: list[str] = ()) -> str:  # fmt: skip
    """The sentence naming the second table's rows: ``held``, the schemes besides the six main ones that validation
    chose to be given every seed and that ``others`` (docs/others.json) holds runs of, the command that trained and
    swept them and where (and whether at another commit than ``data``'s, the first table's), and which of them have
    a Fashion-MNIST cell (``real``); then ``rowless``, the chosen schemes it holds no runs of, which have no row
    yet."""
    out = ""
    if held:
        runs, cells = held_only(others.get("runs", []), held), held_only(others.get("records", []), held)
        where = "; ".join(machines(runs, cells))
        tuned = ("fine-tuned as the six are (`--finetune`)" if held_only(others.get("finetuned", []), held)
                 else "not fine-tuned")  # fmt: skip
        tuned = f"{tuned}; {real_words(held, list(real))}"
        apart = ""
        if data is not None and made_apart(others, held, data):
            apart = (
                " They were made at another commit than the first table: [the reruns](#reruns-of-recorded-runs) "
                "say whether the two commits train a run alike."
            )
        out = (
            f"The second table: {', '.join(label(s) for s in held)}, the schemes besides the six main ones that "
            "validation chose to be given every seed ([protocol.md](protocol.md)). They trained with the six's "
            f"budget and rule, and were trained and swept by `{others['command']}` (docs/others.json; {where}): "
            "every method on validation, the chosen one only on test (so their panels show no other method), "
            f"without the canvas controls; {tuned}.{apart}"
        )
    if rowless:
        out += (f"{' ' if out else ''}Also chosen, with no row here yet: {', '.join(label(s) for s in rowless)} "
                "(not swept with these; [protocol.md](protocol.md) counts the seeds each has so far).")  # fmt: skip
    return out


def render(data: dict, folder: Path, earlier: dict | None = None, cost: dict | None = None,
           fmnist: dict | None = None, reran: dict | None = None, others: dict | None = None,
           chosen: list[str] = (), claimed: dict | None = None,
           remade: dict[str, dict | None] | None = None) -> tuple[str, str]:  # fmt: skip
    """(docs/summary.md, the README's table block) from docs/study.json (``earlier``, docs/rules.json, for the
    reruns' table; ``cost``, docs/cost.json, for the cost column; ``fmnist``, docs/fashion_mnist_study.json, for the
    Fashion-MNIST column; ``reran``, docs/rerun.json, for the reruns on the same kind of machine; ``others``,
    docs/others.json, for the second table's rows of ``chosen``, the other schemes validation chose to be given every
    seed; ``claimed``, docs/claims.json, whose runs ``others`` may train again; ``remade``, other records by path
    whose runs may be reruns of an earlier version of themselves); the figure is written beside the page. Each table
    holds one record's runs: one machine kind, one commit."""
    held = [s for s in chosen if any(r["spec"] == s for r in (others or {}).get("runs", []))]
    rowless = [s for s in chosen if s not in held]
    study = Study(merged(data, others, set(held)) if held else data, cost, fmnist)
    main = [s for s in study.specs if s not in held]
    plot(study, folder / "summary.png")
    missing = [head(*c) for c in COLUMNS if not any(study.values(s, c) for s in study.specs)]
    gaps = any(not study.values(s, c) for s in study.specs for c in COLUMNS if head(*c) not in missing)
    tables = study.table(COLUMNS, main) + (f"\n\n{study.table(COLUMNS, held)}" if held else "")
    page = fill(
        "summary.md",
        command=data["command"],
        coverage=coverage(study),
        others=chosen_others(others, held, rowless, data, [s for s in held if study.values(s, ("fmnist", "native"))]),
        missing=page_missing(missing, gaps),
        cost=cost_line(cost),
        table=tables,
        hindsight=hindsight_line(study),
        guide="\n".join(guide(study)) or "- Nothing is measured on test yet.",
        controls=controls(study),
        entropy=entropy_table(study),
        shuffle=shuffle_table(study),
        noise=ceiling_noise(study),
        reruns=reruns([("study", data, "rules", earlier), ("claims", claimed, "others", others)]),
        same_kind=same_kind_reruns(reran, {"docs/study.json": data, "docs/claims.json": claimed, **(remade or {})}),
        machines=study_machines(data, others if held else None, held),
        not_measured=not_measured(study, fmnist),
    )
    swept = page_missing(missing, gaps, "docs/summary.md")
    note = (f"Mean test top-1 (%) ± the 95 % interval's half-width over seeds (¹: one seed; —: not measured); "
            f"{in_brief(study)}. {swept} [docs/summary.md](docs/summary.md) has every column, the seeds and sizes "
            "each holds, where each was made and the decision guide.")  # fmt: skip
    block = study.table(README_COLUMNS, main)
    if held:
        note += (
            f" The second table: {', '.join(map(label, held))}, the others validation chose to be given every seed, "
            f"trained and swept {'at another commit ' if made_apart(others, held, data) else ''}(docs/others.json)"
            + ("; their test sweep is the chosen method's only." if chosen_only(others, held) else ".")
        )
        block += f"\n\n{study.table(README_COLUMNS, held)}"
    if rowless:
        note += f" Also chosen, with no row yet: {', '.join(map(label, rowless))}."
    return page, f"{block}\n\n{note}"


__all__ = ["COLUMNS", "Study", "costs", "guide", "plot", "render", "mean_ci", "pct"]
