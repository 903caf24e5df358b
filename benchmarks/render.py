"""Render docs/<page>.md (and its plots) from docs/<page>.json, for every page whose JSON is there.

    python benchmarks/render.py        # every page in PAGES whose JSON is in docs/
    python benchmarks/render.py DIR    # the same from DIR/<page>.json (a benchmark run with --out DIR/...)

Nothing is measured here. Every number on a page comes from its JSON, which names the command that made it;
published numbers come from docs/anchors.yaml. Comparison sentences are computed: "A beats B" is written only
where the 95 % intervals over seeds do not overlap.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median

import yaml
from common import ROOT, mean_ci, separated  # noqa: E402  (benchmarks/ is on sys.path as a script)

DOCS = ROOT / "docs"
CHANCE, BAG_CEILING = 0.125, 0.25  # `shapes`: 8 classes; a model blind to patch order tells 2 of them apart


def pct(v: float) -> str:
    return "–" if v is None or math.isnan(v) else f"{100 * v:.1f}"


def interval(values: list[float]) -> str:
    """'mean [low, high] (n)' in percent, the interval clipped to [0, 100]; one value: 'value (1)'."""
    mean, lo, hi = mean_ci(values)
    lo, hi = max(lo, 0.0), min(hi, 1.0)
    return f"{pct(mean)} ({len(values)})" if len(values) < 2 else f"{pct(mean)} [{pct(lo)}, {pct(hi)}] ({len(values)})"


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(r) + " |" for r in [headers, ["---"] * len(headers), *rows]]


def label(pos: str, stem: str) -> str:
    return f"`{pos}`" + (" (conv stem)" if stem == "conv" else "")


def made(d: dict) -> str:
    """The line under a page's title: the command that measured, the machine and, where recorded, its load."""
    m = d["machine"]
    where = f"{m['date']}, {m['cpu']}, {m['cores']} cores, torch {m['torch']}"
    if "load_average" in d:
        where += f", 1-minute load average {d['load_average'][0]:g} at the start"
        if d["load_average"][0] > m["cores"]:
            where += (
                f" (over {m['cores']}: other work shared the machine, so the ratios within a round are what compare)"
            )
    return f"Made by `{d['command']}`, then `python benchmarks/render.py`: {where}."


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


# -- results.md: every scheme trained on `shapes` -----------------------------------------------------------
def render_results(d: dict) -> str:
    b = d["budget"]
    default = b["default_pos_lr_scale"]
    by = defaultdict(list)  # (pos, stem, scale) -> runs
    for r in d["runs"]:
        by[r["pos"], r["stem"], r["pos_lr_scale"]].append(r)
    order = list(dict.fromkeys((r["pos"], r["stem"]) for r in d["runs"]))
    trained = [k for k in order if by.get((*k, default))]
    learns = [k for k in trained if by[(*k, default)][0]["pos_params"]]  # schemes with position parameters

    def top1(key: tuple[str, str], scale: float = default) -> list[float]:
        return [r["test_top1"] for r in sorted(by.get((*key, scale), []), key=lambda r: r["seed"])]

    lines = [
        "# Every scheme on the embedded `shapes` set, default budget",
        "",
        made(d),
        "",
        f"Budget: `python train.py --pos P --seed K` with nothing else: ViT {b['embed_dim']} wide, "
        f"{b['depth']} blocks, {b['num_heads']} heads, patch {b['patch_size']} at {b['img_size']} px, "
        f"{b['train_size']} generated training images, {b['epochs']} epochs, batch {b['batch_size']}, "
        f"AdamW lr {b['lr']:g}, position parameters at lr x {default:g} (`--pos-lr-scale`), fp32 on the CPU. "
        f"Val and test: {b['val_size']} and {b['test_size']} images. Chance is {pct(CHANCE)} %; a model blind to "
        f"patch order can reach at most {pct(BAG_CEILING)} % (the reference shape, not the relation).",
        "",
        "The six main runs (`learned`, `sincos2d`, `rope2d`, `relbias` and `none` with the patch stem, `none` with "
        "the conv stem) are trained with every seed, every other scheme with seed 0, and the three best of those by "
        f"seed-0 validation top-1 ({', '.join(label(*t.split(':')) for t in d.get('top_others', []))}) "
        "with every seed too. "
        "Cells: mean test top-1 in % over seeds, [95 % t-interval], (seeds). Train time: wall time of `Trainer.fit` "
        "(training and per-epoch validation) with one thread per run, two runs at a time, alongside other jobs: "
        "it varies with the machine's load, not only with the scheme.",
        "",
    ]
    rows = []
    for k in trained:
        rs = by[(*k, default)]
        secs = sum(r["train_seconds"] for r in rs) / len(rs)
        rows.append([label(*k), interval(top1(k)), interval([r["best_val_top1"] for r in rs]), f"{secs:.0f} s"])
    lines += table(["scheme", "test top-1", "best val top-1", "train time"], rows)
    lines += [
        "",
        "## The position learning-rate rule",
        "",
        f"The position scheme's own parameters train at lr x `pos_lr_scale` (default {default:g}), the same rule "
        "for every scheme. Under Adam a parameter moves at most about the summed learning rate, ~0.3 over the "
        "default schedule, while a table that starts at std .02 must grow to the scale of the tokens. Rule off "
        "(scale 1) against the default, test top-1; schemes without position parameters "
        f"({', '.join(label(*k) for k in trained if k not in learns)}) train identically at every scale.",
        "",
    ]
    ablated = [k for k in learns if by.get((*k, 1.0))]
    lines += table(["scheme", "scale 1", f"scale {default:g}"],
                   [[label(*k), interval(top1(k, 1.0)), interval(top1(k))] for k in ablated])  # fmt: skip
    lines.append("")
    seed_range = max((max(v) - min(v) for v in map(top1, trained) if len(v) >= 3), default=math.nan)
    for k in ablated:  # a single rule-off seed, held against the default's interval or its single seed
        off, on = top1(k, 1.0), top1(k)
        if len(off) != 1:
            continue
        if len(on) >= 2:
            _, lo, hi = mean_ci(on)
            where = "inside" if lo <= off[0] <= hi else "above" if off[0] > hi else "below"
            lines.append(f"- {label(*k)}: scale 1 scores {pct(off[0])} (one seed), {where} the 95 % interval of "
                         f"scale {default:g}.")  # fmt: skip
        else:
            side = "above" if on[0] >= off[0] else "below"
            lines.append(f"- {label(*k)}: scale {default:g} is {pct(abs(on[0] - off[0]))} points {side} scale 1 "
                         "(one seed each; the widest seed-to-seed range of a scheme with three seeds is "
                         f"{pct(seed_range)} points).")  # fmt: skip
    scales = sorted({r["pos_lr_scale"] for r in d["runs"]})
    swept = [k for k in order if sum(1 for sc in scales if by.get((*k, sc))) > 2]
    if swept:
        lines += ["", "Every scale measured (test top-1 of each seed, seeds 0 / 1 / 2 where run):", ""]
        cells = [[label(*k)] + [" / ".join(map(pct, top1(k, sc))) or "–" for sc in scales] for k in swept]
        lines += table(["scheme", *(f"x {sc:g}" for sc in scales)], cells)
    lines += ["", "## What the intervals allow", ""]
    if by.get(("none", "patch", default)):
        lines.append(f"- `none` with the patch stem (exactly blind to patch order) scores "
                     f"{pct(mean_ci(top1(('none', 'patch')))[0])} %, against the {pct(BAG_CEILING)} % a bag of "
                     "patches can reach.")  # fmt: skip
    lines += comparisons({k: top1(k) for k in trained})
    blind = [k for k in trained if k != ("none", "patch") and mean_ci(top1(k))[0] <= BAG_CEILING + 0.01]
    if blind:
        lines.append(
            f"- At the bag-of-patches ceiling: {', '.join(label(*k) for k in blind)}. The classes are the four "
            "directions from the reference to the circle, and a scheme whose attention is unchanged under mirroring "
            "the patch grid (`alibi2d`'s bias is a function of the offset's length only) cannot tell them apart."
        )
    ref = anchors()["small_data_cifar"]
    cifar10 = ", ".join(f"{k} {v}" for k, v in ref["cifar10"].items())
    lines += ["", f"Published, for orientation ({ref['source']}): {ref['setting']}. CIFAR-10 top-1: {cifar10}. "
              "Relative bias is not a weak scheme when it gets to learn."]  # fmt: skip
    return "\n".join(lines) + "\n"


# -- resolution.md and fashion_mnist.md: transfer to other resolutions ----------------------------------------
def transfer_section(recs: list[dict], train: int, png: Path, chance: float) -> list[str]:
    """The transfer table (every scheme and method, mean [interval] over seeds), where methods separate, the plot."""
    cells = defaultdict(list)  # (scheme, stem, method, (h, w)) -> top-1 per seed
    for r in recs:
        cells[r["scheme"], r["stem"], r["method"], (r["height"], r["width"])].append(r["top1"])
    grids = sorted({(r["height"], r["width"]) for r in recs}, key=lambda hw: (hw[0] * hw[1], hw))
    rows = list(dict.fromkeys((r["scheme"], r["stem"], r["method"], r["default_method"]) for r in recs))
    body = [[label(s, st), m + (" (default)" if default else "")]
            + [interval(cells[s, st, m, g]) if cells.get((s, st, m, g)) else "–" for g in grids]
            for s, st, m, default in rows]  # fmt: skip
    lines = table(["scheme", "method", *(f"{h}" if h == w else f"{h}x{w}" for h, w in grids)], body)
    lines += ["", "Where the methods of one scheme separate (95 % intervals over seeds):", ""]
    for scheme, stem in dict.fromkeys((s, st) for s, st, _, _ in rows):
        methods = [m for s, st, m, _ in rows if (s, st) == (scheme, stem)]
        for g in grids:
            best = max(methods, key=lambda m: mean_ci(cells.get((scheme, stem, m, g)) or [0.0])[0])
            worse = [m for m in methods if separated(cells[scheme, stem, best, g], cells[scheme, stem, m, g])]
            if worse:
                lines.append(
                    f"- {label(scheme, stem)} at {g[0]}x{g[1]}: `{best}` beats {', '.join(f'`{m}`' for m in worse)}."
                )
    plot_resolution(cells, rows, grids, train, png, chance)
    return lines + ["", f"![top-1 against resolution]({png.name})"]


def temperature_section(temp: list[dict]) -> list[str]:
    """YaRN's attention temperature, scale from the larger axis or from the token-count ratio, over seeds."""
    by = defaultdict(list)
    for t in temp:
        by[t["temperature"], t["resolution"]].append(t["top1"])
    res = list(dict.fromkeys(t["resolution"] for t in temp))
    lines = ["Attention temperature of `yarn` on the `rope2d` runs, the scale s taken from the larger axis "
             "(`yarn_temperature=axis`) or from the token-count ratio (`tokens`):", ""]  # fmt: skip
    lines += table(
        ["temperature", *res], [[mode] + [interval(by[mode, r]) for r in res] for mode in ("axis", "tokens")]
    )
    better = [(r, "axis" if mean_ci(by["axis", r])[0] > mean_ci(by["tokens", r])[0] else "tokens")
              for r in res if separated(by["axis", r], by["tokens", r])]  # fmt: skip
    lines += [f"- at {r}: `{mode}` is better." for r, mode in better]
    return lines + ([] if better else ["- The two temperatures are not separated at any of these sizes."])


def render_resolution(d: dict, png: Path) -> str:
    train, blend = d["train_resolution"], d["yarn_blend"]
    lines = [
        "# Resolution transfer on `shapes`",
        "",
        made(d),
        "",
        f"On the runs of docs/results.md (trained at {train} px). The first {d['limit']} images of the test split, "
        "rendered natively at each resolution. Cells: mean top-1 in % over seeds, [95 % t-interval], (seeds); the "
        "first method of each scheme is its default.",
        "",
        *transfer_section(d["records"], train, png, CHANCE),
        "",
        "## YaRN for image grids",
        "",
        "Per rotary frequency of one axis (`rope2d`, theta 100, the default head width, "
        f"{blend['train_len']} tokens trained per axis): gamma = 1 keeps the frequency, 0 interpolates it "
        "(vitpos/pos/rope2d.py, `yarn_ramp`), and the frequency served at 1.5x and 2x the trained axis, "
        "relative to the trained one.",
        "",
    ]
    rows = [[str(k), f"{f:.4f}", f"{g:.2f}", *(f"{v[k]:.3f}" for v in blend["ratio"].values())]
            for k, (f, g) in enumerate(zip(blend["frequencies"], blend["gamma"], strict=True))]  # fmt: skip
    lines += table(["k", "f_k", "gamma", *(f"f'/f at {s}x" for s in blend["ratio"])], rows)
    if d["yarn_temperature"]:
        lines += ["", *temperature_section(d["yarn_temperature"])]
    return "\n".join(lines) + "\n"


def render_fashion_mnist(d: dict, curves_png: Path, res_png: Path) -> str:
    b = d["budget"]
    by = defaultdict(list)
    for r in d["runs"]:
        by[r["pos"], r["stem"]].append(r)
    order = sorted(by, key=lambda k: -mean_ci([r["test_top1"] for r in by[k]])[0])
    seeds = sorted({r["seed"] for r in d["runs"]})
    lines = [
        "# Fashion-MNIST: the position schemes on real data",
        "",
        made(d),
        "",
        f"Budget: `python train.py --config {b['config']} --pos P --stem S --seed K` (seeds "
        f"{', '.join(map(str, seeds))}): ViT {b['embed_dim']} wide, {b['depth']} blocks, {b['num_heads']} heads, "
        f"patch {b['patch_size']} at {b['img_size']} px, a fixed subset of {b['train_limit']} training images "
        f"(the same for every seed), {b['holdout_size']} validation images carved from the rest of train, "
        f"{b['epochs']} epochs of batch {b['batch_size']}, AdamW lr {b['lr']:g}, position parameters at "
        f"lr x {b['pos_lr_scale']:g}, fp32 on the CPU. Test: the 10,000 test images, best checkpoint by validation. "
        "Data: Debian's `dataset-fashion-mnist` (the original idx files, read offline). Chance is 10 %.",
        "",
        "Cells: mean in % over seeds, [95 % t-interval], (seeds). Last 3 epochs: how much the mean validation top-1 "
        "moved over the last three epochs, the test of a flattened curve. Train time: one thread per run, two runs "
        "at a time, alongside other jobs.",
        "",
    ]
    drift, rows = {}, []
    for k in order:
        rs = by[k]
        curve = [sum(c) / len(c) for c in zip(*(r["val_curve"] for r in rs), strict=False)]
        drift[k] = curve[-1] - curve[-4] if len(curve) >= 4 else math.nan
        secs = sum(r["train_seconds"] for r in rs) / len(rs)
        rows.append([label(*k), interval([r["test_top1"] for r in rs]), interval([r["best_val_top1"] for r in rs]),
                     f"{100 * drift[k]:+.1f}", f"{secs:.0f} s"])  # fmt: skip
    lines += table(["scheme", "test top-1", "best val top-1", "last 3 epochs", "train time"], rows)
    moving = [label(*k) for k in order if not abs(drift[k]) < 0.01]
    flat = (
        f"Still moving by 1 point or more over the last three epochs: {', '.join(moving)}."
        if moving
        else "Every scheme's mean validation curve moved less than 1 point over the last three epochs."
    )
    lines += ["", flat, "", f"![validation top-1 per epoch]({curves_png.name})", "", "## What the intervals allow", ""]
    lines += comparisons({k: [r["test_top1"] for r in rs] for k, rs in by.items()})
    plot_curves(by, order, curves_png)
    lines += ["", f"## Resolution transfer (trained at {b['img_size']} px)", "",
              f"Whole-image resize to each resolution (`--resize full`), every transfer method, on the first "
              f"{b['eval_limit'] or 10000} test images, from each run's last checkpoint. Cells as above; the first "
              "method of each scheme is its default.", "",
              *transfer_section(d["records"], b["img_size"], res_png, 0.1)]  # fmt: skip
    if d["yarn_temperature"]:
        lines += ["", "## YaRN's temperature", "", *temperature_section(d["yarn_temperature"])]
    return "\n".join(lines) + "\n"


def axes():
    """A figure and its axes, drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 4.5))


def save(fig, ax, png: Path, legend: str) -> None:
    import matplotlib.pyplot as plt

    ax.legend(fontsize=7, loc=legend)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_curves(by: dict, order: list, png: Path) -> None:
    fig, ax = axes()
    for i, k in enumerate(order):
        curves = [r["val_curve"] for r in by[k]]
        n = min(map(len, curves))
        mean = [100 * sum(c[e] for c in curves) / len(curves) for e in range(n)]
        ax.plot(range(1, n + 1), mean, marker="os^Dv<>ph*"[i % 10], markersize=3, linestyle="-" if i < 6 else "--",
                label=f"{k[0]}{' (conv)' if k[1] == 'conv' else ''}")  # fmt: skip
    ax.set(xlabel="epoch", ylabel="validation top-1 (%), mean over seeds")
    save(fig, ax, png, "lower right")


def plot_resolution(cells: dict, rows: list, grids: list, train: int, png: Path, chance: float) -> None:
    square = [g for g in grids if g[0] == g[1]]
    fig, ax = axes()
    for i, (scheme, stem, method, _) in enumerate(r for r in rows if r[3]):  # each scheme's default method
        xs = [g[0] for g in square if cells.get((scheme, stem, method, g))]
        stats = [mean_ci(cells[scheme, stem, method, (x, x)]) for x in xs]
        err = [[0 if math.isnan(lo) else 100 * (m - lo) for m, lo, _ in stats],
               [0 if math.isnan(hi) else 100 * (hi - m) for m, _, hi in stats]]  # fmt: skip
        ax.errorbar(xs, [100 * m for m, _, _ in stats], yerr=err, marker="osD^v<>ph*"[i % 10],
                    linestyle="-" if i < 6 else "--", capsize=3,
                    label=f"{scheme}{' (conv)' if stem == 'conv' else ''}: {method}")  # fmt: skip
    ax.axhline(100 * chance, color="grey", linestyle=":", label="chance")
    ax.axvline(train, color="black", linewidth=0.8, label=f"trained at {train} px")
    ax.set(xlabel="test resolution (px)", ylabel="test top-1 (%)", ylim=(0, 100), xticks=[g[0] for g in square])
    save(fig, ax, png, "lower left")


# -- measurement pages: performance, performance_compile, export, data, diagnostics --------------
TIMM = {"learned": "`VisionTransformer`", "rope2d": "`vit_small_patch16_rope_224` (an `Eva`, RoPE-Axial)",
        "relbias": "`VisionTransformerRelPos(rel_pos_type='bias')`"}  # fmt: skip
GPUS_PER_NODE = 8


def spread(v: list[float], spec: str) -> str:
    """The median over rounds, (lowest to highest round)."""
    return f"{median(v):{spec}}" + (f" ({min(v):{spec}} to {max(v):{spec}})" if len(v) > 1 else "")


def per_round(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def model_line(d: dict) -> str:
    m = d["dims"]
    return (f"Model `{d['model']}`: {m['embed_dim']} wide, {m['depth']} blocks, {m['num_heads']} heads, patch "
            f"{d['patch_size']}, average pooling, no class token; {d['dtype']} on {d['gpu'] or 'the CPU'}, "
            f"{d['threads']} torch threads. Every contender is warmed up ({d['warmup']} steps), then all run "
            f"round-robin, {d['repeats']} rounds of {d['steps']} steps.")  # fmt: skip


def render_performance(d: dict, export: dict | None = None) -> str:
    """Training throughput from benchmarks/throughput.py; CPU inference under onnxruntime from ``export``
    (docs/export.json, benchmarks/export.py) where given."""
    peaks = anchors()["gpu_peak_tflops"]
    spec = next((v[d["dtype"]] for k, v in peaks.items() if k != "source" and k in (d["gpu"] or "")), None)
    lines = ["# Throughput", "", "## Training against timm", "", made(d), "", model_line(d) + " Step: forward, "
             "cross-entropy, backward, AdamW. img/s: median over rounds; *vs timm* and *overhead vs `none`*: medians "
             "of per-round ratios, (lowest to highest round). Memory: peak of one step above the resting state. FLOPs: "
             "`FlopCounterMode` on one forward; achieved = 3 x forward FLOPs x img/s, against a square matmul "
             f"measured in the same run ({d['matmul_peak_tflops']:.3g} TFLOP/s)"
             + (f" and the datasheet's {spec} TFLOP/s ({peaks['source']})." if spec else "."), "",
             f"timm {d['timm']}, same dims, `global_pool='avg', class_token=False`, no LayerScale: "
             + "; ".join(f"`{k}` against {v}" for k, v in TIMM.items()) + "."]  # fmt: skip
    if d["quick"]:
        lines += ["", "**Smoke-test settings (`--quick`): these numbers show that the benchmark runs, nothing more.**"]
    shapes = []
    for g in d["grids"]:
        c, side = g["contenders"], g["img_size"] // d["patch_size"]
        lines += ["", f"### {side}x{side} grid ({side * side} tokens, {g['img_size']} px, batch {g['batch']})", ""]
        rows = []
        for name, r in c.items():
            ratio = per_round(r["img_s"], c[f"timm:{name}"]["img_s"]) if f"timm:{name}" in c else None
            over = None
            if "none" in c and name != "none" and not name.startswith("timm:"):
                over = [100 * (x - 1) for x in per_round(c["none"]["img_s"], r["img_s"])]
            tflops = 3 * r["gflops_fwd"] * median(r["img_s"]) / 1e3
            rows.append([name.replace("timm:", "timm ") if ":" in name else f"`{name}`", f"{median(r['img_s']):.1f}",
                         spread(ratio, ".3f") if ratio else "–", spread(over, "+.1f") + " %" if over else "–",
                         f"{r['memory_mib']:.0f}", f"{r['gflops_fwd']:.4g}", f"{tflops:.3g}",
                         f"{100 * tflops / d['matmul_peak_tflops']:.1f} %"]
                        + ([f"{100 * tflops / spec:.1f} %"] if spec else []))  # fmt: skip
        heads = ["model", "img/s", "vs timm", "overhead vs `none`", "step memory (MiB)", "GFLOPs/img (fwd)"]
        lines += table([*heads, "achieved TFLOP/s", "of measured peak", *(["of datasheet"] if spec else [])], rows)
        train, rate = max(median(r["img_s"]) for n, r in c.items() if ":" not in n), g["shapes_img_s"]
        shapes.append([f"{g['img_size']} px", f"{rate:.0f}", f"{train:.0f}", f"{rate / train:.1f}x"])
    lines += ["", "### The embedded `shapes` set: rendering against training", "",
              f"`render_shapes` ({d['data_images']} images) in the same process, against the fastest vitpos scheme's "
              "training img/s.", "", *table(["size", "rendered img/s", "training img/s", "ratio"], shapes)]  # fmt: skip
    if export:
        lines += ["", "## Inference on the CPU: onnxruntime against eager PyTorch", "", *export_section(export)]
    return "\n".join(lines) + "\n"


def render_performance_compile(d: dict) -> str:
    lines = ["# torch.compile against eager", "", made(d), "", model_line(d) + " `torch.compile(model, "
             "dynamic=False)` against the same module eager. *train*: a training step; *eval*: a forward without "
             "gradients at each grid, served by the model built for the training grid (one static graph per "
             "resolution). First call: wall seconds, compilation included; speed-up: median of per-round ratios "
             "(lowest to highest round). Eager img/s are in [performance.md](performance.md).", ""]  # fmt: skip
    rows, ups = [], defaultdict(list)
    for r in d["rows"]:
        up = per_round(r["compiled_img_s"], r["eager_img_s"])
        ups[r["mode"]].append(median(up))
        eager, comp = median(r["eager_img_s"]), median(r["compiled_img_s"])
        rows.append([f"`{r['scheme']}`", r["mode"], f"{r['grid']}x{r['grid']}", f"{r['first_call_s']:.1f}",
                     f"{eager:.1f}", f"{comp:.1f}", spread(up, ".2f")])  # fmt: skip
    lines += table(["scheme", "mode", "grid", "first call (s)", "eager img/s", "compiled img/s", "speed-up"], rows)
    lines += ["", "Median speed-ups range " + ", ".join(f"{min(v):.2f}-{max(v):.2f}x in {k}" for k, v in ups.items())
              + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def export_section(d: dict) -> list[str]:
    """The table of benchmarks/export.py: the exported ONNX file under onnxruntime against eager, per size."""
    m = d["model"]
    lines = [made(d), "",
             f"Model: {m['embed_dim']} wide, {m['depth']} blocks, {m['num_heads']} heads, patch {m['patch_size']}, "
             f"built at {m['img_size']} px, random weights. One ONNX file per scheme, exported once with dynamic "
             "batch, height and width (`python -m vitpos.export`), timed at every size against eager "
             f"(`torch.inference_mode()`), both in one process, round-robin, {d['threads']} thread(s), batch "
             f"{d['batch']}, {d['repeats']} rounds of {d['steps']} batches; onnxruntime {d['onnxruntime']}. "
             "img/s: median over rounds; ratio: median of per-round ratios (lowest-highest). Max rel. diff: "
             "max |onnxruntime - eager| / max |eager| of the logits.", ""]  # fmt: skip
    rows = [[f"`{r['scheme']}`", str(r["img_size"]), f"{r['eager_img_s']:.0f}", f"{r['onnxruntime_img_s']:.0f}",
             f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})", f"{r['max_rel_diff']:.1e}"]
            for r in d["rows"]]  # fmt: skip
    return lines + table(["scheme", "px", "eager img/s", "onnxruntime img/s", "onnxruntime / eager", "max rel. diff"],
                         rows)  # fmt: skip


def render_export(d: dict) -> str:
    title = "# Exported ONNX under onnxruntime against eager PyTorch (CPU inference)"
    return "\n".join([title, "", *export_section(d)]) + "\n"


def workers_needed(per_core: float, gpu_img_s: float, gpus: int = GPUS_PER_NODE) -> int:
    """The fewest one-core loader workers that keep ``gpus`` GPUs fed."""
    return math.ceil(gpus * gpu_img_s / per_core)


def render_data(d: dict) -> str:
    meas, src, a = d["measured"], d["images"], anchors()
    ref, inet = a["vit_s16_train_throughput"], a["imagenet_train"]
    lines = ["# Data loading: ImageFolder against streaming shards", "", made(d), "",
             f"Images: {src['images']} JPEGs like ImageNet's (random crops of scikit-learn's two bundled photos, "
             f"375-500 px long side, quality 90), {src['mean_kb']:.0f} KB and {src['mean_megapixels']:.3f} megapixels "
             f"on average; ImageNet's training images average {1e6 * inet['gigabytes'] / inet['images']:.0f} KB "
             f"({inet['source']}). Pipeline: the training transforms of `configs/imagenet.yaml` at 224 px, RandAugment "
             "magnitudes clipped at 9, batch 64, one loader process with one torch thread, litdata "
             f"{d['litdata']}; *decode only*: the same readers without the transforms. The readers run round-robin; "
             "images per CPU-second of the process (`time.process_time`, warm page cache) and per wall-second, "
             "medians over rounds.", ""]  # fmt: skip
    rows = [[k, f"{r['img_per_cpu_s']:.0f}", f"{r['img_per_s']:.0f}", ", ".join(f"{v:.0f}" for v in
             r["rounds_img_per_cpu_s"])] for k, r in meas.items()]  # fmt: skip
    lines += table(["reader", "images / CPU-second", "images / s (wall)", "rounds (img / CPU-s)"], rows)
    folder, shards = meas["ImageFolder"]["img_per_cpu_s"], meas["shards"]["img_per_cpu_s"]
    need = GPUS_PER_NODE * ref["train_img_per_s"]
    lines += ["", f"Shards / ImageFolder, full pipeline: {shards / folder:.2f}x per core.", "",
              f"## Loader workers for one {GPUS_PER_NODE}-GPU node", "",
              f"Published training throughput: {ref['train_img_per_s']:.0f} img/s per GPU for {ref['model']} on "
              f"{ref['hardware']} ({ref['source']}); {GPUS_PER_NODE} such GPUs take {need:.0f} img/s. Workers = "
              "ceil(GPUs x GPU img/s / img/s per core), one core each:", ""]  # fmt: skip
    per_core = {k: meas[k]["img_per_cpu_s"] for k in ("ImageFolder", "shards")}
    gpu = ref["train_img_per_s"]
    rows = [[k, f"{v:.0f}", str(workers_needed(v, gpu, 1)), str(workers_needed(v, gpu))] for k, v in per_core.items()]
    lines += table(["reader", "img/s per core", "workers per GPU", f"workers per {GPUS_PER_NODE}-GPU node"], rows)
    return "\n".join(lines) + "\n"


def render_diagnostics(d: dict) -> str:
    lines = ["# Position diagnostics, one checkpoint per scheme", "", made(d), "",
             "Per run: `python -m vitpos.diagnose --ckpt RUN/checkpoints/last.ckpt --out docs/diagnostics/RUN` on "
             f"{d['num_images']} validation images. Patch shuffle: top-1 as the images are and with the patches "
             "permuted (one fixed permutation). Attention distances in patches.", ""]  # fmt: skip
    rows = []
    for r in d["runs"]:
        sh, dist, name = r["patch_shuffle"], r["attention_distance"], r["run"]
        pics = " ".join(f"[{Path(n).stem}](diagnostics/{name}/{n})" for n in r["pictures"])
        rows.append([f"`{name}`", f"{100 * sh['top1']:.1f} %", f"{100 * sh['top1_shuffled']:.1f} %",
                     f"{100 * sh['drop']:+.1f} pts", f"{dist[0]:.2f} / {dist[-1]:.2f}", pics])  # fmt: skip
    lines += table(["run", "top-1", "top-1, patches shuffled", "drop", "attention distance, first / last block",
                    "pictures"], rows)  # fmt: skip
    return "\n".join(lines) + "\n"


def read(path: Path) -> dict | None:
    """A benchmark's JSON record, if there is one (a bare list in resolution.json is an evaluator's own output)."""
    data = json.loads(path.read_text()) if path.is_file() else None
    return data if isinstance(data, dict) else None


PAGES = {  # docs/<name>.md from its JSON record and the folder the record is in (plots go there too)
    "results": lambda d, folder: render_results(d),
    "resolution": lambda d, folder: render_resolution(d, folder / "resolution.png"),
    "fashion_mnist": lambda d, folder: render_fashion_mnist(
        d, folder / "fashion_mnist_curves.png", folder / "fashion_mnist_resolution.png"
    ),
    "performance": lambda d, folder: render_performance(d, read(folder / "export.json")),
    "performance_compile": lambda d, folder: render_performance_compile(d),
    "export": lambda d, folder: render_export(d),
    "data": lambda d, folder: render_data(d),
    "diagnostics": lambda d, folder: render_diagnostics(d),
}


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DOCS
    for name, page in PAGES.items():
        data = read(folder / f"{name}.json")
        if data is not None:
            (folder / f"{name}.md").write_text(page(data, folder))
            print(f"wrote {folder / name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
