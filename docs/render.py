"""Render docs/<page>.md (and its plots) from docs/<page>.json, for every page whose JSON is there.

    python docs/render.py        # every page in PAGES whose JSON is in docs/
    python docs/render.py DIR    # the same from DIR/<page>.json (a benchmark run with --out DIR/...)

The benchmarks in benchmarks/ measure and write the JSON; nothing is measured here. Every number on a page comes
from its JSON, which names the command that made it; published numbers come from docs/anchors.yaml. Comparison
sentences are computed: "A beats B" is written only where the 95 % intervals over seeds do not overlap.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median

import yaml
from scipy.stats import t as student_t

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # run as a script: this checkout's vitpos first
from benchmarks.rules import option_leaves, pos_rule_of  # noqa: E402
from vitpos.config import Config  # noqa: E402
from vitpos.resolution import resolution_label  # noqa: E402

CHANCE, BAG_CEILING = 0.125, 0.25  # `shapes`: 8 classes; a model blind to patch order tells 2 of them apart
LEARN_BAR = 0.9  # the test top-1 `learned` and `relbias` are held to at the default budget
GPUS_PER_NODE = 8
TIMM = {"learned": "`VisionTransformer`", "rope2d": "`vit_small_patch16_rope_224` (an `Eva`, RoPE-Axial)",
        "relbias": "`VisionTransformerRelPos(rel_pos_type='bias')`"}  # fmt: skip
Block = str | list[str] | None  # a paragraph, or the lines of a table or list; None or empty: left out


# -- statistics over seeds -----------------------------------------------------------------------------------
def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95 % t-interval over seeds; low = high = nan for one value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = student_t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def separated(a: list[float], b: list[float]) -> bool:
    """Whether the 95 % intervals of two means do not overlap (each needs >= 2 seeds): only then 'A beats B'."""
    (_, alo, ahi), (_, blo, bhi) = mean_ci(a), mean_ci(b)
    return not any(math.isnan(v) for v in (alo, ahi, blo, bhi)) and (alo > bhi or blo > ahi)


# -- what the pages share -------------------------------------------------------------------------------------
def page(*blocks: Block) -> str:
    """A page from its blocks, one blank line apart."""
    return "\n\n".join(b if isinstance(b, str) else "\n".join(b) for b in blocks if b) + "\n"


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(r) + " |" for r in [headers, ["---"] * len(headers), *rows]]


def pct(v: float) -> str:
    return "–" if v is None or math.isnan(v) else f"{100 * v:.1f}"


def interval(values: list[float]) -> str:
    """'mean [low, high] (n)' in percent, the interval clipped to [0, 100]; one value: 'value (1)'; none: '–'."""
    if not values:
        return "–"
    mean, lo, hi = mean_ci(values)
    lo, hi = max(lo, 0.0), min(hi, 1.0)
    return f"{pct(mean)} ({len(values)})" if len(values) < 2 else f"{pct(mean)} [{pct(lo)}, {pct(hi)}] ({len(values)})"


def spread(v: list[float], spec: str) -> str:
    """The median over rounds, (lowest to highest round)."""
    return f"{median(v):{spec}}" + (f" ({min(v):{spec}} to {max(v):{spec}})" if len(v) > 1 else "")


def per_round(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def label(pos: str, stem: str) -> str:
    """A scheme as a page names it: POS, or POS|OPTIONS for a run with scheme options (see ``scheme_of``)."""
    pos, _, opts = pos.partition("|")
    return f"`{pos}`" + (f" ({opts})" if opts else "") + (" (conv stem)" if stem == "conv" else "")


def scheme_of(r: dict) -> str:
    """A run's scheme as a key: POS, and |KEY=VALUE, ... where it set scheme options (a composition's part's
    options by their own keys), so runs with other options are not pooled with the scheme's defaults."""
    opts = [f"{k}={v:g}" for k, v in option_leaves(r.get("pos_kwargs") or {})]
    return r["pos"] + ("|" + ", ".join(opts) if opts else "")


def made(d: dict) -> str:
    """The line under a page's title: the command that measured, the machine and, where recorded, its load."""
    m = d["machine"]
    where = f"{m['date']}, {m['cpu']}, {m['cores']} cores, torch {m['torch']}"
    if "load_average" in d:
        where += f", 1-minute load average {d['load_average'][0]:g} at the start"
        if d["load_average"][0] > m["cores"] and "repeats" in d:  # a timed benchmark: rounds, round-robin
            where += (
                f" (over {m['cores']}: other work shared the machine, so the ratios within a round are what compare)"
            )
    return f"Made by `{d['command']}`, then `python docs/render.py`: {where}."


def anchors() -> dict:
    return yaml.safe_load((DOCS / "anchors.yaml").read_text())


def comparisons(scored: dict[tuple[str, str], list[float]]) -> list[str]:
    """One line per (pos, stem) with >= 2 seeds: whom it beats (disjoint 95 % intervals) and whom it does not."""
    scored = {k: v for k, v in scored.items() if len(v) >= 2}
    keys = sorted(scored, key=lambda k: -mean_ci(scored[k])[0])
    lines = []
    for i, a in enumerate(keys):
        beaten = [label(*b) for b in keys[i + 1 :] if separated(scored[a], scored[b])]
        tied = [label(*b) for b in keys[i + 1 :] if not separated(scored[a], scored[b])]
        if beaten:
            tail = f"; not separated from {', '.join(tied)}" if tied else ""
            lines.append(f"- {label(*a)} beats {', '.join(beaten)}{tail}.")
        elif tied:
            lines.append(f"- {label(*a)} is not separated from {', '.join(tied)}.")
    return lines


def run_row(key: tuple[str, str], runs: list[dict], *more: str) -> list[str]:
    """A scheme's runs over seeds: test and best validation top-1, ``more`` cells, the mean train time."""
    secs = sum(r["train_seconds"] for r in runs) / len(runs)
    return [label(*key), interval([r["test_top1"] for r in runs]), interval([r["best_val_top1"] for r in runs]),
            *more, f"{secs:.0f} s"]  # fmt: skip


@contextmanager
def figure(png: Path, legend: str) -> Iterator:
    """The axes of a figure drawn without a display, saved to ``png`` with its legend at ``legend``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    yield ax
    ax.legend(fontsize=7, loc=legend)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def line_style(i: int, markers: str, pos: str, stem: str, what: str = "") -> dict:
    """The i-th line of a plot: its own marker, solid for the six main runs and dashed after, and its label."""
    name = pos + (" (conv)" if stem == "conv" else "") + what
    return {"marker": markers[i % len(markers)], "linestyle": "-" if i < 6 else "--", "label": name}


# -- results.md: every scheme trained on `shapes` -----------------------------------------------------------
def run_rule(r: dict, prefix: str = "") -> tuple:
    """A run's position rule (``prefix`` "default_": the default a budget names), as a key."""
    return tuple(pos_rule_of(r, prefix).values())


def epochs_text(n: float) -> str:
    return f"{n:g} epoch{'' if n == 1 else 's'}"


def rule_order(rule: tuple) -> tuple:
    """Where a rule's column goes: without decay first, then towards zero, then towards the start; unramped before
    ramped; then by decay, ramp and scale. Every field counts, so the columns do not follow a set's hash order."""
    scale, decay, to, ramp = rule
    return decay > 0, to == "start", ramp > 0, decay, ramp, scale


def rule_label(rule: tuple, default: tuple) -> str:
    scale, decay, to, ramp = rule
    ramped = f", ramped over {epochs_text(ramp)}" if ramp else ""
    pulled = f", {decay:g} to {to}" if decay else ""
    return f"x {scale:g}{ramped}{pulled}" + (" (default)" if rule == default else "")


def rule_words(rule: tuple) -> str:
    """A position rule in words, with the flags that set it."""
    scale, decay, decay_to, ramp = rule
    return (f"position parameters at lr x {scale:g} (`--pos-lr-scale`)"
            + (f" ramped in over {epochs_text(ramp)} (`--pos-lr-warmup-epochs`)" if ramp else "")
            + (f" with a decay of {decay:g} towards {'their start' if decay_to == 'start' else 'zero'} "
               "(`--pos-weight-decay`, `--pos-decay-to`)" if decay else " without decay"))  # fmt: skip


def rule_line(names: list[str], results: dict | None, command: str) -> str:
    """The position rule the named runs (folder names) trained under, from docs/results.json; whether the
    default."""
    runs = {Path(r["run"]).name: r for r in (results or {}).get("runs", [])}
    rules = sorted({run_rule(runs[n]) for n in names if n in runs and runs[n].get("pos_params")})
    if not rules:
        return ""
    line = "The runs trained their " + "; others their ".join(rule_words(ru) for ru in rules) + "."
    default = run_rule(results["budget"], "default_")
    optioned = sorted({scheme_of(runs[n]) for n in names if n in runs and runs[n].get("pos_kwargs")})
    if rules != [default]:
        line += f" The default rule differs ({rule_words(default)})."
    if optioned:
        named = ", ".join(label(s, "patch") for s in optioned)
        line += f" Runs with scheme options, not the scheme's defaults: {named}."
    if rules != [default] or optioned:
        line += f" `{command}` again takes the runs at the defaults."
    return line


def render_results(d: dict, folder: Path) -> str:
    b = d["budget"]
    default = run_rule(b, "default_")
    off = run_rule({"pos_lr_scale": 1.0})
    before = run_rule({"pos_lr_scale": default[0]})  # the default scale alone, from the first step: the first rule
    baselines = [ru for ru in dict.fromkeys([off, before]) if ru != default]
    by = defaultdict(list)  # (pos, stem, rule) -> runs
    for r in d["runs"]:
        by[scheme_of(r), r["stem"], run_rule(r)].append(r)
    order = list(dict.fromkeys((scheme_of(r), r["stem"]) for r in d["runs"]))
    trained = [k for k in order if by.get((*k, default)) and "|" not in k[0]]  # the default rule and options
    learns = [k for k in trained if by[(*k, default)][0]["pos_params"]]  # schemes with position parameters
    # ... and those runs with other scheme options, whose runs under other rules the rule tables show too
    with_params = {(scheme_of(r), r["stem"]) for r in d["runs"] if r["pos_params"]}
    measured = learns + [k for k in order if k not in learns and k in with_params]
    rules = sorted({run_rule(r) for r in d["runs"] if r["pos_params"]}, key=rule_order)

    def top1(key: tuple[str, str], rule: tuple = default) -> list[float]:
        return [r["test_top1"] for r in sorted(by.get((*key, rule), []), key=lambda r: r["seed"])]

    def against(k: tuple[str, str], other: tuple) -> str:
        """The default against another rule: intervals when both have seeds, else a one-seed value against them."""
        them, on = top1(k, other), top1(k)
        if not them:
            return "–"
        if len(them) > 1 and len(on) > 1:
            if not separated(them, on):
                return "not separated"
            return "default above" if mean_ci(on)[0] > mean_ci(them)[0] else "default below"
        if len(them) == len(on) == 1:
            return f"{100 * (on[0] - them[0]):+.1f} points (one seed each)"
        one, many, who, whose = (
            (them[0], on, "it", "the default's") if len(them) == 1 else (on[0], them, "the default", "its")
        )
        _, lo, hi = mean_ci(many)
        where = "inside" if lo <= one <= hi else "above" if one > hi else "below"
        return f"{who} (one seed) {where} {whose} 95 % interval"

    def short(rule: tuple) -> list[str]:
        """What a rule leaves short: `learned` and `relbias` seeds under the bar, schemes below the rule off."""
        under = [
            f"{label(*k)} seed {r['seed']} ({pct(r['test_top1'])})"
            for base in ("learned", "relbias")
            for k in measured
            if k[1] == "patch" and k[0].partition("|")[0] == base
            for r in sorted(by.get((*k, rule), []), key=lambda r: r["seed"])
            if r["test_top1"] < LEARN_BAR
        ]
        below = []
        for k in measured:
            them, on = top1(k, off), top1(k, rule)
            if len(them) < 2 or not on:
                continue
            _, lo, hi = mean_ci(them)
            if (len(on) < 2 or separated(them, on)) and mean_ci(on)[0] < lo:
                below.append(f"{label(*k)} {interval(on)} against [{pct(lo)}, {pct(hi)}]")
        runs = sum(1 for r in d["runs"] if r["pos_params"] and run_rule(r) == rule)
        return [rule_label(rule, default), "; ".join(under) or "none", "; ".join(below) or "none", str(runs)]

    fitted = {k: [r["train_top1"] for r in by[(*k, default)] if r.get("train_top1") is not None] for k in trained}
    allowed = comparisons({k: top1(k) for k in trained})
    if by.get(("none", "patch", default)):
        allowed.insert(0, f"- `none` with the patch stem (exactly blind to patch order) scores "
                          f"{pct(mean_ci(top1(('none', 'patch')))[0])} %, against the {pct(BAG_CEILING)} % a bag "
                          "of patches can reach.")  # fmt: skip
    blind = [label(*k) for k in trained if k != ("none", "patch") and mean_ci(top1(k))[0] <= BAG_CEILING + 0.01]
    if blind:
        allowed.append(f"- At the bag-of-patches ceiling: {', '.join(blind)}. The classes are the four directions "
                       "from the reference to the circle, and a scheme whose attention is unchanged under mirroring "
                       "the patch grid (`alibi2d`'s bias is a function of the offset's length only) cannot tell them "
                       "apart.")  # fmt: skip
    ref = anchors()["small_data_cifar"]
    main = {tuple(t.split(":")) for t in [*d.get("main_runs", []), *d.get("top_others", [])]}
    more_seeds = [label(*k) for k in trained if k not in main and len(top1(k)) > 1]
    others = [k for k in trained if k not in main]
    every_seed = bool(others) and len(more_seeds) == len(others)
    rule_text = rule_words(default)
    return page(
        "# Every scheme on the embedded `shapes` set, default budget",
        made(d),
        f"Budget: `python train.py --pos P --seed K` with nothing else: ViT {b['embed_dim']} wide, "
        f"{b['depth']} blocks, {b['num_heads']} heads, patch {b['patch_size']} at {b['img_size']} px, "
        f"{b['train_size']} generated training images, {b['epochs']} epochs, batch {b['batch_size']}, "
        f"AdamW lr {b['lr']:g}, {rule_text}, fp32 on the CPU. "
        f"Val and test: {b['val_size']} and {b['test_size']} images. Chance is {pct(CHANCE)} %; a model blind to "
        f"patch order can reach at most {pct(BAG_CEILING)} % (the reference shape, not the relation).",
        "The six main runs (`learned`, `sincos2d`, `rope2d`, `relbias` and `none` with the patch stem, `none` with "
        "the conv stem) are trained with every seed, every other scheme with seed 0 first, and the three best of "
        f"those by seed-0 validation top-1 ({', '.join(label(*t.split(':')) for t in d.get('top_others', []))}) "
        "with every seed too (chosen once and kept in docs/results.json, `--repick` chooses again; "
        "docs/fashion_mnist.md trains them too)"
        + ("; so is every other scheme, for the comparisons below and in docs/resolution.md" if every_seed
           else f"; {', '.join(more_seeds)} {'has' if len(more_seeds) == 1 else 'have'} further seeds for the "
           "comparisons below and in docs/resolution.md"
           if more_seeds else "")
        + ". Cells: mean test top-1 in % over seeds, [95 % t-interval], (seeds). Train top-1: the last epoch's "
        "running top-1 on the training images (what the model fitted; the gap to test is what it did not "
        "generalise). Train time: wall time of `Trainer.fit` (training and per-epoch validation) with one thread "
        "per run, two runs at a time, alongside other jobs: it varies with the machine's load, not only with the "
        "scheme." + hardware_line([r for k in trained for r in by[(*k, default)]], "the runs in this table"),
        table(["scheme", "test top-1", "best val top-1", "train top-1", "train time"],
              [run_row(k, by[(*k, default)], interval(fitted[k])) for k in trained]),
        "## The position rule",
        f"The position scheme's own parameters (everything under `model.pos`) follow one rule, the same for every "
        f"scheme: {rule_text}. The scale, because under Adam a parameter moves at most about the summed learning "
        "rate, ~0.3 over the default schedule, while a table that starts at std .02 must grow to the scale of the "
        "tokens. The decay, because at that rate a parameter takes full-size steps whatever the size of its "
        "gradient: the pull bounds how far it moves from where it started (one the loss keeps pushing settles "
        "about 1/decay from it). Towards the start rather than zero, so that PEG's kernel or RoPE-Mixed's "
        "frequencies are not erased. The ramp (the scale rising from 1 over the first epochs), because at the full "
        "scale from the first step the compositions with a learned table end below their rule-off runs (the last "
        "table). `relbias` starts each table from a distance penalty (`--pos-kwarg locality=L`, default 1: -L, "
        "-L/2, -L/4, ... per patch of distance over the heads), its own initialisation rather than part of the "
        "rule; rows marked (locality=0) are its runs from noise alone, Swin's start. Schemes without "
        f"position parameters ({', '.join(label(*k) for k in trained if k not in learns)}) train identically "
        "under every rule.",
        "Every rule measured (test top-1; a rule: the lr scale, its ramp, the decay and what it pulls towards):",
        table(["scheme", *(rule_label(ru, default) for ru in rules)],
              [[label(*k), *(interval(top1(k, ru)) for ru in rules)]
               for k in measured if sum(1 for ru in rules if top1(k, ru)) > 1]),  # fmt: skip
        "The default against the rule off (scale 1, no decay)"
        + (" and against the same scale without a decay:" if before != default else ":"),
        table(["scheme", *(f"against {rule_label(ru, default)}" for ru in baselines)],
              [[label(*k), *(against(k, ru) for ru in baselines)] for k in learns]),  # fmt: skip
        f"What each rule leaves short: the seeds of `learned` and `relbias` under {100 * LEARN_BAR:g} % test top-1, "
        "and the schemes whose runs under the rule fall below the 95 % interval of the rule off (where it has "
        "seeds; with seeds on both sides, only where the intervals separate). A rule measured on few runs can "
        "leave short what it was not measured on:",
        table(["rule", f"under {100 * LEARN_BAR:g} %", "below the rule off", "runs (schemes with position parameters)"],
              [short(ru) for ru in rules if ru != off]),  # fmt: skip
        "[pos_dynamics.md](pos_dynamics.md) follows the learned table through training in `learned` and in "
        "`rope2d+learned`, under the default rule and the rule off.",
        "## What the intervals allow",
        allowed,
        f"Published, for orientation ({ref['source']}): {ref['setting']}. CIFAR-10 top-1: "
        f"{', '.join(f'{k} {v}' for k, v in ref['cifar10'].items())}. Relative bias is not a weak scheme when it "
        "gets to learn.",
    )  # fmt: skip


# -- resolution.md and fashion_mnist.md: transfer to other resolutions ----------------------------------------
def transfer_section(recs: list[dict], train: int, png: Path, chance: float) -> list[Block]:
    """The transfer table (every scheme and method, mean [interval] over seeds), where methods separate, the plot."""
    cells = defaultdict(list)  # (scheme, stem, method, (h, w)) -> top-1 per seed
    for r in recs:
        cells[r["scheme"], r["stem"], r["method"], (r["height"], r["width"])].append(r["top1"])
    grids = sorted({(r["height"], r["width"]) for r in recs}, key=lambda hw: (hw[0] * hw[1], hw))
    rows = list(dict.fromkeys((r["scheme"], r["stem"], r["method"], r["default_method"]) for r in recs))
    body = [[label(s, st), m + (" (default)" if default else "")]
            + [interval(cells.get((s, st, m, g), [])) for g in grids]
            for s, st, m, default in rows]  # fmt: skip
    wins = []
    for scheme, stem in dict.fromkeys((s, st) for s, st, _, _ in rows):
        methods = [m for s, st, m, _ in rows if (s, st) == (scheme, stem)]
        for g in grids:
            best = max(methods, key=lambda m: mean_ci(cells.get((scheme, stem, m, g)) or [0.0])[0])
            worse = [f"`{m}`" for m in methods if separated(cells[scheme, stem, best, g], cells[scheme, stem, m, g])]
            if worse:
                wins.append(f"- {label(scheme, stem)} at {g[0]}x{g[1]}: `{best}` beats {', '.join(worse)}.")
    square = [g for g in grids if g[0] == g[1]]
    with figure(png, "lower left") as ax:
        for i, (scheme, stem, method, _) in enumerate(r for r in rows if r[3]):  # each scheme's default method
            xs = [g[0] for g in square if cells.get((scheme, stem, method, g))]
            stats = [mean_ci(cells[scheme, stem, method, (x, x)]) for x in xs]
            err = [[0 if math.isnan(lo) else 100 * (m - lo) for m, lo, _ in stats],
                   [0 if math.isnan(hi) else 100 * (hi - m) for m, _, hi in stats]]  # fmt: skip
            ax.errorbar(xs, [100 * m for m, _, _ in stats], yerr=err, capsize=3,
                        **line_style(i, "osD^v<>ph*", scheme, stem, f": {method}"))  # fmt: skip
        ax.axhline(100 * chance, color="grey", linestyle=":", label="chance")
        ax.axvline(train, color="black", linewidth=0.8, label=f"trained at {train} px")
        ax.set(xlabel="test resolution (px)", ylabel="test top-1 (%)", ylim=(0, 100), xticks=[g[0] for g in square])
    return [table(["scheme", "method", *map(resolution_label, grids)], body),
            "Where the methods of one scheme separate (95 % intervals over seeds):", wins,
            f"![top-1 against resolution]({png.name})"]  # fmt: skip


def temperature_section(temp: list[dict]) -> list[Block]:
    """YaRN's attention temperature, scale from the larger axis or from the token-count ratio, over seeds."""
    by = defaultdict(list)
    for t in temp:
        by[t["temperature"], t["resolution"]].append(t["top1"])
    res = list(dict.fromkeys(t["resolution"] for t in temp))
    better = [f"- at {r}: `{'axis' if mean_ci(by['axis', r])[0] > mean_ci(by['tokens', r])[0] else 'tokens'}` is "
              "better." for r in res if separated(by["axis", r], by["tokens", r])]  # fmt: skip
    return ["Attention temperature of `yarn` on the `rope2d` runs, the scale s taken from the larger axis "
            "(`yarn_temperature=axis`) or from the token-count ratio (`tokens`):",
            table(["temperature", *res], [[m, *(interval(by[m, r]) for r in res)] for m in ("axis", "tokens")]),
            better or ["- The two temperatures are not separated at any of these sizes."]]  # fmt: skip


def finetune_section(ft: dict, results: dict | None) -> list[Block]:
    """Swin v2's Table 1 on `shapes`: tested directly at each size against after one epoch of fine-tuning there, for
    the runs at the current default rule only (those of an earlier default are counted, not tabled)."""
    train, sizes = ft["train_resolution"], ft["sizes"]
    runs = {r["run"]: r for r in (results or {}).get("runs", [])}
    default = run_rule(results["budget"], "default_") if results else ()

    def now(run: str) -> bool:  # at the default rule and options (a run results.json lacks: taken to be)
        r = runs.get(run)
        return r is None or not r.get("pos_params") or (run_rule(r) == default and not r.get("pos_kwargs"))

    now_runs = [f for f in ft["finetuned"] if now(f["run"])]
    old_runs = [f for f in ft["finetuned"] if not now(f["run"])]
    n = int(ft["finetune"][ft["finetune"].index("--epochs") + 1])
    unit = "epoch" if n == 1 else "epochs"
    more = f"{'one' if n == 1 else n} more {unit}"
    heads = ["scheme", f"{train} px", f"{train} px +{n} {unit}"]
    heads += [h for s in sizes for h in (f"{s} px directly", f"{s} px fine-tuned")]
    blocks: list[Block] = [
        "## Fine-tuning at a new size (Swin v2's Table 1 protocol)",
        rule_line(sorted({Path(f["run"]).name for f in now_runs}), results, ft["command"]),
        f"Made by `{ft['command']}`. Each {train} px run tested directly at each size (its default method, the "
        f"whole test split) and after {more} there (`train.py --init-from RUN/checkpoints/last.ckpt "
        f"--img-size R {' '.join(ft['finetune'])}`, which carries the scheme's parameters to the new grid by its "
        f"default method); `{heads[2]}`: the same training at the training size, the control for the extra "
        "training. Test top-1, mean [95 % interval] (seeds)." + hardware_line(now_runs),
        *finetune_table(ft, now_runs, runs, heads),
    ]
    if old_runs:  # one current default, one set of numbers: an earlier default's table is retired (git keeps it)
        blocks.append(
            f"{len(old_runs)} fine-tuning runs of an earlier default are not shown; the study fine-tunes "
            "their schemes at the current default again (`python -m benchmarks.finetune --train-missing`)."
        )
    return blocks


def finetune_table(ft: dict, finetuned: list[dict], runs: dict[str, dict], heads: list[str]) -> list[Block]:
    """The table of the ``finetuned`` runs (test top-1 at 32 px from ``runs``, results.json's runs by folder), and
    the verdicts: fine-tuned against tested directly at each size."""
    train, sizes = ft["train_resolution"], ft["sizes"]
    trained = {f["run"] for f in finetuned}
    names = {Path(run).name for run in trained}
    direct, tuned, base = defaultdict(list), defaultdict(list), defaultdict(list)
    for r in ft["records"]:  # RUN/checkpoints/last.ckpt, its path absolute: the run by its folder's name
        if r["default_method"] and r["height"] == r["width"] and Path(r["checkpoint"]).parents[1].name in names:
            direct[r["scheme"], r["stem"], r["height"]].append(r["top1"])
    for f in finetuned:
        tuned[f["pos"], f["stem"], f["img_size"]].append(f["test_top1"])
    for run in trained & runs.keys():
        base[runs[run]["pos"], runs[run]["stem"]].append(runs[run]["test_top1"])
    rows, verdicts = [], []
    for k in dict.fromkeys((f["pos"], f["stem"]) for f in finetuned):
        cells = [interval(base[k]), interval(tuned[(*k, train)])]
        by: dict[str, list[str]] = defaultdict(list)  # verdict ("{}": where the sizes go) -> the sizes it holds at
        for s in sizes:
            cells += [interval(direct[(*k, s)]), interval(tuned[(*k, s)])]
            seeds = min(len(tuned[(*k, s)]), len(direct[(*k, s)]))
            if seeds == 0:
                continue  # nothing to compare: the cells say "–"
            if seeds == 1:
                by["one seed at {} px, so not compared"].append(f"{s}")
            elif separated(tuned[(*k, s)], direct[(*k, s)]):
                better = mean_ci(tuned[(*k, s)])[0] > mean_ci(direct[(*k, s)])[0]
                by[f"fine-tuned {'above' if better else 'below'} tested directly at {{}} px"].append(f"{s}")
            else:
                by["fine-tuned and tested directly not separated at {} px"].append(f"{s}")
        verdicts += [f"- {label(*k)}: {v.format(' and '.join(at))}." for v, at in by.items()]
        rows.append([label(*k), *cells])
    return [table(heads, rows), verdicts]


def hardware_line(runs: list[dict], who: str = "the fine-tuning runs") -> str:
    """Where ``runs`` trained, as their results.json name it (with how many on each), if any of them does."""
    count = Counter(r.get("hardware") for r in runs)
    named = [(hw, n) for hw, n in count.most_common() if hw]
    if not named:
        return ""
    where = ", ".join(f"{hw} ({n} run{'s' if n > 1 else ''})" for hw, n in named)
    # records a study kept from an invocation older than the hardware field
    older = f"; not recorded for {count[None]} older ones" if count[None] else ""
    return f" Where {who} trained: {where}{older}."


def published_section(recs: list[dict], train: int) -> list[Block]:
    """The published resolution claims of docs/anchors.yaml against the same schemes here (default methods): LookHere's
    and DINOv3's at every size above the training one, LieRE's ranking at the largest size where both have seeds."""
    a, cells = anchors(), defaultdict(list)  # (scheme, side) -> top-1 per seed, square grids, patch stem
    for r in recs:
        if r["default_method"] and r["stem"] == "patch" and r["height"] == r["width"]:
            cells[r["scheme"], r["height"]].append(r["top1"])
    sides = sorted({s for _, s in cells if s >= train})
    if not sides:
        return []

    def verdict(hi: str, lo: str, side: int) -> str:
        """Published: ``hi`` above ``lo``; here, at ``side``."""
        x, y = cells.get((hi, side), []), cells.get((lo, side), [])
        if not x or not y:
            return "not measured here"
        if separated(x, y):
            return "agrees" if mean_ci(x)[0] > mean_ci(y)[0] else "disagrees"
        diff = 100 * (mean_ci(x)[0] - mean_ci(y)[0])
        return f"not separated ({diff:+.1f} points" + (", one seed)" if min(len(x), len(y)) < 2 else ")")

    def judged_at(hi: str, lo: str) -> int:
        """The largest size with seeds of both (an interval each), else the largest size with both measured."""
        both = [s for s in sides if len(cells.get((hi, s), [])) > 1 and len(cells.get((lo, s), [])) > 1]
        return max(both or [s for s in sides if cells.get((hi, s)) and cells.get((lo, s))] or sides)

    def at_each(hi: str, lo: str) -> list[str]:
        """The verdict at every size above the training one."""
        return [f"- At {s} px ({s / train:g}x), `{hi}` above `{lo}`: {verdict(hi, lo, s)}." for s in sides if s > train]

    def here(schemes: list[str]) -> list[str]:
        return table(["scheme", *(f"{s} px ({s / train:g}x)" for s in sides)],
                     [[f"`{k}`", *(interval(cells.get((k, s), [])) for s in sides)]
                      for k in schemes])  # fmt: skip

    lh, lie, dino = a["lookhere"], a["liere_synthetic"], a["dinov3_rope"]
    order = sorted(lie["top1"], key=lambda k: -lie["top1"][k][-1])  # the published ranking at its largest size
    pairs = [
        (hi, lo) for i, hi in enumerate(order) for lo in order[i + 1 :] if lie["top1"][hi][-1] > lie["top1"][lo][-1]
    ]
    return [
        f"## Against published resolution claims (trained at {train} px, default methods)",
        f"**LookHere against 2D-RoPE** ({lh['source']}; {lh['setting']}, {lh['test_px'] / lh['train_px']:.2f}x): "
        f"`{lh['scheme']}` is {lh['points']:+g} points over `{lh['against']}`. Here:",
        here([lh["scheme"], lh["against"]]),
        at_each(lh["scheme"], lh["against"]),
        f"**LieRE's synthetic task** ({lie['source']}; {lie['setting']}): "
        + "; ".join(f"`{k}` {' / '.join(f'{v:g}' for v in vs)}" for k, vs in lie["top1"].items())
        + " (the absolute table as `learned`). Here:",
        here(order),
        [f"- At {(at := judged_at(hi, lo))} px ({at / train:g}x), `{hi}` above `{lo}` (published at {lie['px'][-1]} "
         f"px): {verdict(hi, lo, at)}." for hi, lo in pairs],
        f"**DINOv3's normalised coordinates** ({dino['source']}; {dino['setting']}): `{dino['scheme']}` against "
        f"`{dino['against']}`'s integer coordinates. Here:",
        here([dino["scheme"], dino["against"]]),
        at_each(dino["scheme"], dino["against"]),
    ]  # fmt: skip


def render_resolution(d: dict, folder: Path) -> str:
    train, blend = d["train_resolution"], d["yarn_blend"]
    rows = [[str(k), f"{f:.4f}", f"{g:.2f}", *(f"{v[k]:.3f}" for v in blend["ratio"].values())]
            for k, (f, g) in enumerate(zip(blend["frequencies"], blend["gamma"], strict=True))]  # fmt: skip
    return page(
        "# Resolution transfer on `shapes`",
        made(d),
        f"On the runs of docs/results.md (trained at {train} px). The first {d['limit']} images of the test split, "
        "rendered natively at each resolution. Cells: mean top-1 in % over seeds, [95 % t-interval], (seeds); the "
        "first method of each scheme is its default.",
        rule_line(
            [Path(r["checkpoint"]).parents[1].name for r in d["records"]], read(folder / "results.json"), d["command"]
        ),
        *transfer_section(d["records"], train, folder / "resolution.png", CHANCE),
        "## YaRN for image grids",
        "Per rotary frequency of one axis (`rope2d`, theta 100, the default head width, "
        f"{blend['train_len']} tokens trained per axis): gamma = 1 keeps the frequency, 0 interpolates it "
        "(vitpos/pos/rope2d.py, `yarn_ramp`), and the frequency served at 1.5x and 2x the trained axis, "
        "relative to the trained one.",
        table(["k", "f_k", "gamma", *(f"f'/f at {s}x" for s in blend["ratio"])], rows),
        *(temperature_section(d["yarn_temperature"]) if d["yarn_temperature"] else []),
        *published_section(d["records"], train),
        *(finetune_section(ft, read(folder / "results.json")) if (ft := read(folder / "finetune.json")) else []),
    )


def render_fashion_mnist(d: dict, folder: Path) -> str:
    b = d["budget"]
    by = defaultdict(list)
    for r in d["runs"]:
        by[scheme_of(r), r["stem"]].append(r)
    order = sorted(by, key=lambda k: -mean_ci([r["test_top1"] for r in by[k]])[0])
    o = Config().optim
    now = pos_rule_of(vars(o))
    optioned = ", ".join(label(*k) for k in order if "|" in k[0])
    stale = (
        [f"The default rule now differs ({rule_words(tuple(now.values()))})"]
        if run_rule(b) != tuple(now.values())
        else []
    )
    stale += [f"these runs set scheme options that are not the defaults: {optioned}"] if optioned else []
    epochs = {k: list(zip(*(r["val_curve"] for r in by[k]), strict=False)) for k in order}  # per epoch, one per seed
    mean = {k: [sum(v) / len(v) for v in e] for k, e in epochs.items()}  # the mean validation curve
    drift = {k: c[-1] - c[-4] if len(c) >= 4 else math.nan for k, c in mean.items()}
    moving = [label(*k) for k in order if not abs(drift[k]) < 0.01]
    curves_png = folder / "fashion_mnist_curves.png"
    with figure(curves_png, "lower right") as ax:
        for i, (k, e) in enumerate(epochs.items()):
            ax.plot(range(1, len(e) + 1), [100 * sum(v) / len(v) for v in e], markersize=3,
                    **line_style(i, "os^Dv<>ph*", *k))  # fmt: skip
        ax.set(xlabel="epoch", ylabel="validation top-1 (%), mean over seeds")
    return page(
        "# Fashion-MNIST: the position schemes on real data",
        made(d),
        f"Budget: `python train.py --config {b['config']} --pos P --stem S --seed K` (seeds "
        f"{', '.join(map(str, sorted({r['seed'] for r in d['runs']})))}): ViT {b['embed_dim']} wide, {b['depth']} "
        f"blocks, {b['num_heads']} heads, patch {b['patch_size']} at {b['img_size']} px, a fixed subset of "
        f"{b['train_limit']} training images (the same for every seed), {b['holdout_size']} validation images carved "
        f"from the rest of train, {b['epochs']} epochs of batch {b['batch_size']}, AdamW lr {b['lr']:g}, "
        f"{rule_words(run_rule(b))}, fp32 on the CPU. Test: the 10,000 test images, best checkpoint "
        "by validation. Data: Debian's `dataset-fashion-mnist` (the original idx files, read offline). Chance is 10 %.",
        "; ".join(stale) + f": `{d['command']}` again trains the schemes with position parameters at the defaults, "
        "beside these runs." if stale else None,
        "Cells: mean in % over seeds, [95 % t-interval], (seeds). Last 3 epochs: how much the mean validation top-1 "
        "moved over the last three epochs, the test of a flattened curve. Train time: one thread per run, two runs "
        "at a time, alongside other jobs." + hardware_line(d["runs"], "the runs"),
        table(["scheme", "test top-1", "best val top-1", "last 3 epochs", "train time"],
              [run_row(k, by[k], f"{100 * drift[k]:+.1f}") for k in order]),
        f"Still moving by 1 point or more over the last three epochs: {', '.join(moving)}." if moving
        else "Every scheme's mean validation curve moved less than 1 point over the last three epochs.",
        f"![validation top-1 per epoch]({curves_png.name})",
        "## What the intervals allow",
        comparisons({k: [r["test_top1"] for r in rs] for k, rs in by.items()}),
        f"## Resolution transfer (trained at {b['img_size']} px)",
        f"Whole-image resize to each resolution (`--resize full`), every transfer method, on the first "
        f"{b['eval_limit'] or 10000} test images, from each run's last checkpoint. Cells as above; the first "
        "method of each scheme is its default.",
        *transfer_section(d["records"], b["img_size"], folder / "fashion_mnist_resolution.png", 0.1),
        *(["## YaRN's temperature", *temperature_section(d["yarn_temperature"])] if d["yarn_temperature"] else []),
    )  # fmt: skip


# -- measurement pages: performance, performance_compile, export, data, diagnostics --------------------------
def model_line(d: dict) -> str:
    m = d["dims"]
    return (f"Model `{d['model']}`: {m['embed_dim']} wide, {m['depth']} blocks, {m['num_heads']} heads, patch "
            f"{d['patch_size']}, average pooling, no class token; {d['dtype']} on {d['gpu'] or 'the CPU'}, "
            f"{d['threads']} torch threads. Every contender is warmed up ({steps(d['warmup'])}), then all run "
            f"round-robin, {d['repeats']} rounds of {steps(d['steps'])}.")  # fmt: skip


def steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def throughput_rows(c: dict, matmul: float, spec: float | None) -> list[list[str]]:
    """One row per contender of a grid: img/s, against timm and `none` per round, memory, FLOPs, fraction of peak."""
    rows = []
    for name, r in c.items():
        timm, ours = c.get(f"timm:{name}"), ":" not in name
        over, rope = None, None  # step-time overheads per round, in %
        if ours and name != "none" and "none" in c:
            over = [100 * (x - 1) for x in per_round(c["none"]["img_s"], r["img_s"])]
        if ours and name != "rope2d" and "rope2d" in c:
            rope = [100 * (x - 1) for x in per_round(c["rope2d"]["img_s"], r["img_s"])]
        tflops = 3 * r["gflops_fwd"] * median(r["img_s"]) / 1e3
        rows.append([f"`{name}`" if ours else name.replace(":", " "), f"{median(r['img_s']):.1f}",
                     spread(per_round(r["img_s"], timm["img_s"]), ".3f") if timm else "–",
                     spread(over, "+.1f") + " %" if over else "–", spread(rope, "+.1f") + " %" if rope else "–",
                     f"{r['memory_mib']:.0f}", f"{r['gflops_fwd']:.4g}",
                     f"{tflops:.3g}", f"{100 * tflops / matmul:.1f} %",
                     *([f"{100 * tflops / spec:.1f} %"] if spec else [])])  # fmt: skip
    return rows


def render_performance(d: dict, folder: Path) -> str:
    """Training throughput from benchmarks/throughput.py; CPU inference under onnxruntime from
    ``folder``/export.json (benchmarks/export.py) where there is one."""
    peaks, export = anchors()["gpu_peak_tflops"], read(folder / "export.json")
    spec = next((v[d["dtype"]] for k, v in peaks.items() if k != "source" and k in (d["gpu"] or "")), None)
    heads = ["model", "img/s", "vs timm", "overhead vs `none`", "vs `rope2d`", "step memory (MiB)", "GFLOPs/img (fwd)",
             "achieved TFLOP/s", "of measured peak", *(["of datasheet"] if spec else [])]  # fmt: skip
    grids, shapes = [], []
    for g in d["grids"]:
        side, rate = g["img_size"] // d["patch_size"], g["shapes_img_s"]
        train = max(median(r["img_s"]) for n, r in g["contenders"].items() if ":" not in n)  # the fastest scheme
        grids += [f"### {side}x{side} grid ({side * side} tokens, {g['img_size']} px, batch {g['batch']})",
                  table(heads, throughput_rows(g["contenders"], d["matmul_peak_tflops"], spec))]  # fmt: skip
        shapes.append([f"{g['img_size']} px", f"{rate:.0f}", f"{train:.0f}", f"{rate / train:.1f}x"])
    return page(
        "# Throughput",
        "## Training against timm",
        made(d),
        model_line(d) + " Step: forward, cross-entropy, backward, AdamW. img/s: median over rounds; *vs timm*: "
        "img/s against timm's; *overhead vs `none`* and *vs `rope2d`*: step time against theirs; each the median of "
        "per-round ratios, (lowest to highest round). Memory: peak of one step above the resting state. FLOPs: "
        "`FlopCounterMode` on one forward; achieved = 3 x forward FLOPs x img/s, against a "
        f"square matmul measured in the same run ({d['matmul_peak_tflops']:.3g} TFLOP/s)"
        + (f" and the datasheet's {spec} TFLOP/s ({peaks['source']})." if spec else "."),
        f"timm {d['timm']}, same dims, `global_pool='avg', class_token=False`, no LayerScale: "
        + "; ".join(f"`{k}` against {v}" for k, v in TIMM.items()) + ".",
        "**Smoke-test settings (`--quick`): these numbers show that the benchmark runs, nothing more.**"
        if d["quick"] else None,
        *grids,
        "### The embedded `shapes` set: rendering against training",
        f"`render_shapes` ({d['data_images']} images) in the same process, against the fastest vitpos scheme's "
        "training img/s.",
        table(["size", "rendered img/s", "training img/s", "ratio"], shapes),
        *(["## Inference on the CPU: onnxruntime against eager PyTorch", *export_section(export)] if export else []),
    )  # fmt: skip


def render_performance_compile(d: dict, folder: Path) -> str:
    rows, ups = [], defaultdict(list)
    for r in d["rows"]:
        up = per_round(r["compiled_img_s"], r["eager_img_s"])
        ups[r["mode"]].append(median(up))
        rows.append([f"`{r['scheme']}`", r["mode"], f"{r['grid']}x{r['grid']}", f"{r['first_call_s']:.1f}",
                     f"{median(r['eager_img_s']):.1f}", f"{median(r['compiled_img_s']):.1f}",
                     spread(up, ".2f")])  # fmt: skip
    return page(
        "# torch.compile against eager",
        made(d),
        model_line(d) + " `torch.compile(model, dynamic=False)` against the same module eager. *train*: a training "
        "step; *eval*: a forward without gradients at each grid, served by the model built for the training grid (one "
        "static graph per resolution). First call: wall seconds, compilation included; speed-up: median of per-round "
        "ratios (lowest to highest round). Eager img/s are in [performance.md](performance.md).",
        table(["scheme", "mode", "grid", "first call (s)", "eager img/s", "compiled img/s", "speed-up"], rows),
        "Median speed-ups range " + ", ".join(f"{min(v):.2f}-{max(v):.2f}x in {k}" for k, v in ups.items()) + ".",
    )


def export_section(d: dict) -> list[Block]:
    """The table of benchmarks/export.py: the exported ONNX file under onnxruntime against eager, per size."""
    m = d["model"]
    rows = [[f"`{r['scheme']}`", str(r["img_size"]), f"{r['eager_img_s']:.0f}", f"{r['onnxruntime_img_s']:.0f}",
             f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})", f"{r['max_rel_diff']:.1e}"]
            for r in d["rows"]]  # fmt: skip
    return [made(d),
            f"Model: {m['embed_dim']} wide, {m['depth']} blocks, {m['num_heads']} heads, patch {m['patch_size']}, "
            f"built at {m['img_size']} px, random weights. One ONNX file per scheme, exported once with dynamic "
            "batch, height and width (`python -m vitpos.export`), timed at every size against eager "
            f"(`torch.inference_mode()`), both in one process, round-robin, {d['threads']} thread(s), batch "
            f"{d['batch']}, {d['repeats']} rounds of {d['steps']} batches; onnxruntime {d['onnxruntime']}. "
            "img/s: median over rounds; ratio: median of per-round ratios (lowest-highest). Max rel. diff: "
            "max |onnxruntime - eager| / max |eager| of the logits.",
            table(["scheme", "px", "eager img/s", "onnxruntime img/s", "onnxruntime / eager", "max rel. diff"],
                  rows)]  # fmt: skip


def render_export(d: dict, folder: Path) -> str:
    return page("# Exported ONNX under onnxruntime against eager PyTorch (CPU inference)", *export_section(d))


def workers_needed(per_core: float, gpu_img_s: float, gpus: int = GPUS_PER_NODE) -> int:
    """The fewest one-core loader workers that keep ``gpus`` GPUs fed."""
    return math.ceil(gpus * gpu_img_s / per_core)


def render_data(d: dict, folder: Path) -> str:
    meas, src, a = d["measured"], d["images"], anchors()
    ref, inet = a["vit_s16_train_throughput"], a["imagenet_train"]
    gpu, per_core = ref["train_img_per_s"], {k: meas[k]["img_per_cpu_s"] for k in ("ImageFolder", "shards")}
    return page(
        "# Data loading: ImageFolder against streaming shards",
        made(d),
        f"Images: {src['images']} JPEGs like ImageNet's (random crops of scikit-learn's two bundled photos, 375-500 px "
        f"long side, quality 90), {src['mean_kb']:.0f} KB and {src['mean_megapixels']:.3f} megapixels on average; "
        f"ImageNet's training images average {1e6 * inet['gigabytes'] / inet['images']:.0f} KB ({inet['source']}). "
        "Pipeline: the training transforms of `configs/imagenet.yaml` at 224 px, RandAugment magnitudes clipped at 9, "
        f"batch 64, one loader process with one torch thread, litdata {d['litdata']}; *decode only*: the same readers "
        "without the transforms. The readers run round-robin; images per CPU-second of the process "
        "(`time.process_time`, warm page cache) and per wall-second, medians over rounds.",
        table(["reader", "images / CPU-second", "images / s (wall)", "rounds (img / CPU-s)"],
              [[k, f"{r['img_per_cpu_s']:.0f}", f"{r['img_per_s']:.0f}",
                ", ".join(f"{v:.0f}" for v in r["rounds_img_per_cpu_s"])] for k, r in meas.items()]),
        f"Shards / ImageFolder, full pipeline: {per_core['shards'] / per_core['ImageFolder']:.2f}x per core.",
        f"## Loader workers for one {GPUS_PER_NODE}-GPU node",
        f"Published training throughput: {gpu:.0f} img/s per GPU for {ref['model']} on {ref['hardware']} "
        f"({ref['source']}); {GPUS_PER_NODE} such GPUs take {GPUS_PER_NODE * gpu:.0f} img/s. Workers = ceil(GPUs x "
        "GPU img/s / img/s per core), one core each:",
        table(["reader", "img/s per core", "workers per GPU", f"workers per {GPUS_PER_NODE}-GPU node"],
              [[k, f"{v:.0f}", str(workers_needed(v, gpu, 1)), str(workers_needed(v, gpu))]
               for k, v in per_core.items()]),
    )  # fmt: skip


def render_diagnostics(d: dict, folder: Path) -> str:
    """One row per run of benchmarks/diagnostics.py: patch-shuffle top-1, attention distance, links to its pictures."""
    rows = []
    for r in d["runs"]:
        sh, dist, name = r["patch_shuffle"], r["attention_distance"], r["run"]
        pics = " ".join(f"[{Path(n).stem}](diagnostics/{name}/{n})" for n in r["pictures"])
        rows.append([f"`{name}`", f"{100 * sh['top1']:.1f} %", f"{100 * sh['top1_shuffled']:.1f} %",
                     f"{100 * sh['drop']:+.1f} pts", f"{dist[0]:.2f} / {dist[-1]:.2f}", pics])  # fmt: skip
    return page(
        "# Position diagnostics, one checkpoint per scheme",
        made(d),
        "Per run: `python -m vitpos.diagnose --ckpt RUN/checkpoints/last.ckpt --out docs/diagnostics/RUN` on "
        f"{d['num_images']} validation images. Patch shuffle: top-1 as the images are and with the patches permuted "
        "(one fixed permutation). Attention distances in patches.",
        rule_line([r["run"] for r in d["runs"]], read(folder / "results.json"), d["command"]),
        table(["run", "top-1", "top-1, patches shuffled", "drop", "attention distance, first / last block", "pictures"],
              rows),
    )  # fmt: skip


# -- pos_dynamics.md: how the position parameters move ---------------------------------------------------------
ALIKE = 1.25  # two runs' position parameters "move alike" where every logged ratio lies within [1/ALIKE, ALIKE]


def render_pos_dynamics(d: dict, folder: Path) -> str:
    """Per run of benchmarks/pos_dynamics.py: its top-1 and its position parameters' rms and gradient rms over
    training; each scheme against the first (``learned``) under the same rule, step by step."""
    runs, b = d["runs"], d["budget"]
    default = run_rule(b)  # the default when the runs trained

    def rule_name(r: dict) -> str:
        return rule_label(run_rule(r), default) if r["rule"] == "default" else "off (x 1, no decay)"

    rows = []
    for r in runs:
        peak = max(range(len(r["rms"])), key=r["rms"].__getitem__)
        rows.append([f"`{r['pos']}`", rule_name(r), pct(r["test_top1"]), pct(r["train_top1"]),
                     f"{r['rms'][0]:.3f} (step {r['step'][0]})", f"{r['rms'][peak]:.3f} (step {r['step'][peak]})",
                     f"{r['rms'][-1]:.3f}",
                     f"{median(r['grad_rms']):.1e}"])  # fmt: skip
    base = runs[0]["pos"]
    pairs, alike = [], []
    for r in runs:
        ref = next(x for x in runs if x["pos"] == base and x["rule"] == r["rule"])
        if r is ref:
            continue
        at = {step: i for i, step in enumerate(r["step"])}
        both = [(at[step], i) for i, step in enumerate(ref["step"]) if step in at]  # the steps both runs logged
        ratio = {k: [r[k][j] / ref[k][i] for j, i in both] for k in ("rms", "grad_rms")}
        top1 = f"{pct(r['test_top1'])} / {pct(ref['test_top1'])}"
        pairs.append([f"`{r['pos']}` / `{base}`", rule_name(r), spread(ratio["rms"], ".2f"),
                      spread(ratio["grad_rms"], ".2f"), top1])  # fmt: skip
        if all(1 / ALIKE <= v <= ALIKE for v in ratio["rms"]) and 1 / ALIKE <= median(ratio["grad_rms"]) <= ALIKE:
            alike.append(f"`{r['pos']}` under the {r['rule']} rule")
    png = folder / "pos_dynamics.png"
    with figure(png, "upper right") as ax:
        for i, r in enumerate(runs):
            ax.plot(r["step"], r["rms"], markevery=6, markersize=3, linestyle="-" if r["rule"] == "default" else "--",
                    marker="os^Dv"[i % 5], label=f"{r['pos']}, rule {r['rule']}")  # fmt: skip
        ax.set(xlabel="optimizer step", ylabel="rms of the position parameters", yscale="log")
    reading = (
        f"The position parameters of {', '.join(alike)} move like those of `{base}` under the same rule: their rms "
        f"stays within a factor {ALIKE:g} of it at every logged step, and the median ratio of the gradients' rms too. "
        "A per-group rule (the learning-rate scale, its ramp, the decay, Adam's epsilon) acts through these sizes or "
        "not at all, so what it does to the table of one scheme it does to the other's."
        if alike
        else ""
    )
    return page(
        "# How the position parameters move",
        made(d),
        f"Runs: `python train.py --pos P --seed {runs[0]['seed']}` at the default budget of docs/results.md "
        f"({b['epochs']} epochs of batch {b['batch_size']}, AdamW lr {b['lr']:g}), under the default position rule "
        f"({rule_words(run_rule(b))}) and with it off (`--pos-lr-scale 1 --pos-weight-decay 0`). Every run logs the "
        "rms of its position parameters (`pos/rms`; `learned`'s table starts at std .02) and of their gradients "
        "(`pos/grad_rms`, before clipping) every 10 optimizer steps in `logs/metrics.csv`. Top-1 in %.",
        table(["scheme", "rule", "test top-1", "train top-1", "rms, first logged", "rms at its peak", "rms at the end",
               "gradient rms, median"], rows),
        f"Each scheme against `{base}` under the same rule, at every step both logged: the ratio of the two runs, "
        "median (lowest to highest).",
        table(["runs", "rule", "rms", "gradient rms", "test top-1"], pairs),
        reading,
        f"![rms of the position parameters per step]({png.name})",
    )  # fmt: skip


def read(path: Path) -> dict | None:
    """A benchmark's JSON record, if there is one (a bare list in resolution.json is an evaluator's own output)."""
    data = json.loads(path.read_text()) if path.is_file() else None
    return data if isinstance(data, dict) else None


PAGES = {  # docs/<name>.md from its JSON record and the folder the record is in (plots go there too)
    "results": render_results,
    "resolution": render_resolution,
    "fashion_mnist": render_fashion_mnist,
    "performance": render_performance,
    "performance_compile": render_performance_compile,
    "export": render_export,
    "data": render_data,
    "diagnostics": render_diagnostics,
    "pos_dynamics": render_pos_dynamics,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0]) if argv else DOCS
    for name, render in PAGES.items():
        data = read(folder / f"{name}.json")
        if data is not None:  # a page without its JSON is left as it is
            (folder / f"{name}.md").write_text(render(data, folder))
            print(f"wrote {folder / name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
