"""Resolution-transfer benchmark: train every position scheme on `shapes` at 32 px, test at 24-64 px.

    python benchmarks/resolution_transfer.py                      # the full run (writes docs/resolution.*)
    python benchmarks/resolution_transfer.py --epochs 1 --train-size 512 --schemes rope2d learned \\
        --out /tmp/bench --docs /tmp/bench/docs                   # a quick check

Each scheme of ``vitpos.POS_SCHEMES`` is trained with the patch stem, plus ``none`` with the conv stem,
with ``python train.py`` at the Config defaults (the default training budget) unless flags override
them. Then ``python -m vitpos.evaluate`` sweeps the test split at 24, 32, 48 and 64 px (0.75x-2x) with
every transfer method of every scheme, and ``DOCS/resolution.md`` gets the table, the plot, the exact
command and a paragraph that holds the measurements against the published findings.

A run folder that already holds a finished run (results.json) is reused, so an interrupted benchmark
continues where it stopped; ``--retrain`` trains everything anew.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vitpos import POS_SCHEMES  # noqa: E402
from vitpos.config import Config  # noqa: E402
from vitpos.evaluate import load_records, markdown_table  # noqa: E402

DEFAULT_RUNS = [f"{pos}:patch" for pos in POS_SCHEMES] + ["none:conv"]
RESOLUTIONS = [24, 32, 48, 64]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", nargs="+", default=DEFAULT_RUNS, metavar="POS[:STEM]",
                   help=f"runs to train (default: {' '.join(DEFAULT_RUNS)})")  # fmt: skip
    p.add_argument("--epochs", type=int, help="training epochs (default: the Config default)")
    p.add_argument("--train-size", type=int, help="generated training images (default: the Config default)")
    p.add_argument("--img-size", type=int, default=32, help="training resolution")
    p.add_argument("--train-resolutions", type=int, nargs="+",
                   help="also train every run with these resolutions, one per batch (folders '<run>-multires'), "
                        "and compare single- with multi-resolution training")  # fmt: skip
    p.add_argument("--multires-schemes", nargs="+", metavar="POS[:STEM]",
                   help="the runs that get a multi-resolution twin (default: every run in --schemes)")  # fmt: skip
    p.add_argument("--resolutions", nargs="+", default=[str(r) for r in RESOLUTIONS], help="test resolutions")
    p.add_argument("--split", default="test", choices=["val", "test"], help="split the sweep is scored on")
    p.add_argument("--eval-limit", type=int, help="score only the first N images of the split (quick checks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--out", default="runs/bench-resolution", help="folder for the training runs and the sweep")
    p.add_argument("--docs", default=str(ROOT / "docs"), help="where resolution.md/.png/.json are written")
    p.add_argument("--retrain", action="store_true", help="train again even where a finished run exists")
    args = p.parse_args(argv)
    for spec in args.schemes + (args.multires_schemes or []):
        pos, _, stem = spec.partition(":")
        if pos not in POS_SCHEMES or (stem or "patch") not in ("patch", "conv"):
            p.error(f"bad run '{spec}': POS[:STEM] with POS in {', '.join(POS_SCHEMES)}, STEM patch or conv")
    return args


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("VITPOS_RUN_OUT", None)
    return env


def _run(cmd: list[str]) -> None:
    print("+", shlex.join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, env=_env(), check=True)


def train(args: argparse.Namespace, spec: str, out: Path, train_resolutions: list[int] | None = None) -> dict:
    """Train one run (or reuse its finished folder); `train_resolutions` makes it a multi-resolution run."""
    pos, _, stem = spec.partition(":")
    stem = stem or "patch"
    run_dir = out / f"{pos}-{stem}{'-multires' if train_resolutions else ''}"
    if (run_dir / "results.json").is_file() and not args.retrain:
        print(f"reusing the finished run in {run_dir}", flush=True)
    else:
        cmd = [sys.executable, "train.py", "--pos", pos, "--stem", stem, "--img-size", str(args.img_size),
               "--seed", str(args.seed), "--accelerator", args.accelerator, "--devices", str(args.devices),
               "--strategy", args.strategy, "--out", str(run_dir)]  # fmt: skip
        if args.epochs is not None:
            cmd += ["--epochs", str(args.epochs)]
        if args.train_size is not None:
            cmd += ["--train-size", str(args.train_size)]
        if train_resolutions:
            cmd += ["--train-resolutions", *map(str, train_resolutions)]
        if run_dir.exists():
            cmd.append("--overwrite")  # an unfinished or stale run: train.py moves it aside
        _run(cmd)
    return json.loads((run_dir / "results.json").read_text()) | {"ckpt": str(run_dir / "checkpoints" / "last.ckpt")}


# -- the report -----------------------------------------------------------------------------------
def _top1(records: list[dict], scheme: str, stem: str, method: str, res: int) -> float | None:
    for r in records:
        if (r["scheme"], r["stem"], r["method"], r["height"], r["width"]) == (scheme, stem, method, res, res):
            return r["top1"]
    return None


def _best(records: list[dict], scheme: str, stem: str, res: int) -> tuple[str, float] | None:
    rs = [r for r in records if (r["scheme"], r["stem"], r["height"], r["width"]) == (scheme, stem, res, res)]
    if not rs:
        return None
    top = max(rs, key=lambda r: r["top1"])
    return top["method"], top["top1"]


def findings(records: list[dict], train_res: int) -> str:
    """A paragraph per published claim, stating what was measured here (whatever it is)."""
    from vitpos.data import BAG_OF_PATCHES_CEILING

    squares = sorted({r["height"] for r in records if r["height"] == r["width"]})
    big = max(squares)
    small = min(squares)
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731
    pts = lambda a, b: f"{100 * (a - b):+.1f} points"  # noqa: E731
    out = []

    rope_t, learned_t = (
        _best(records, "rope2d", "patch", train_res),
        _top1(records, "learned", "patch", "bicubic", train_res),
    )
    rope_b, learned_b = _best(records, "rope2d", "patch", big), _top1(records, "learned", "patch", "bicubic", big)
    if rope_t and rope_b and learned_t is not None and learned_b is not None:
        rope_drop, learned_drop = rope_b[1] - rope_t[1], learned_b - learned_t
        if abs(rope_drop - learned_drop) <= 0.01:
            verdict = "is a tie within a point: it neither confirms nor contradicts"
        else:
            verdict = "agrees with" if rope_drop > learned_drop else "does not reproduce"
        out.append(
            f"**RoPE vs a resampled learned table.** RoPE-ViT (Heo et al. 2024) finds that 2D RoPE keeps its accuracy "
            f"beyond the training resolution better than a learned absolute table that is resampled (ViT-S, 224 -> "
            f"384: APE 80.4 -> 79.4, RoPE-Axial 80.9 -> 80.0, RoPE-Mixed 80.9 -> 81.8). Here, from {train_res} to "
            f"{big} px, rope2d (best method at {big}: `{rope_b[0]}`) goes {pct(rope_t[1])} -> {pct(rope_b[1])} "
            f"({pts(rope_b[1], rope_t[1])}) and learned (bicubic) {pct(learned_t)} -> {pct(learned_b)} "
            f"({pts(learned_b, learned_t)}): this {verdict} the published ordering."
        )
    rs_t, rs_b = (
        _top1(records, "relbias", "patch", "resize", train_res),
        _top1(records, "relbias", "patch", "resize", big),
    )
    cl_b = _top1(records, "relbias", "patch", "clamp", big)
    if rs_t is not None and rs_b is not None:
        clamp = "" if cl_b is None else f"; clamping the offsets to the trained range instead gives {pct(cl_b)}"
        trend = "degrades too" if rs_b < rs_t - 0.01 else "does not degrade here"
        out.append(
            f"**Resized relative-bias table.** Swin v2 reports that a bicubically resized bias table degrades as the "
            f"window grows (Swin-T 81.7 at the trained 8x8 window, 79.4 / 77.2 / 73.2 / 68.7 at 12-24). Here the "
            f"resized table goes {pct(rs_t)} at {train_res} px -> {pct(rs_b)} at {big} px ({pts(rs_b, rs_t)}){clamp}: "
            f"it {trend}."
        )
    none_t = _top1(records, "none", "patch", "none", train_res)
    conv_t = _top1(records, "none", "conv", "none", train_res)
    if none_t is not None:
        beaten = none_t > BAG_OF_PATCHES_CEILING + 0.02
        status = (
            "above that ceiling, which a bag of patches should not reach: look for a leak"
            if beaten
            else "at or below that ceiling, as expected: without position the relation cannot be read"
        )
        conv = (
            ""
            if conv_t is None
            else f" The conv stem, whose zero padding tells border tokens where they are (Islam et al. 2020), lets "
            f"the same position-free transformer reach {pct(conv_t)}."
        )
        out.append(
            f"**No position.** A position-free ViT sees an unordered bag of patches, and `shapes` is a position task "
            f"(the class is where the circle lies relative to the other object): its bag-of-patches ceiling is "
            f"{pct(BAG_OF_PATCHES_CEILING)} (chance 12.5 %). DeiT-tiny without position loses ~4 points on ImageNet, "
            f"where position matters less. Measured at {train_res} px: {pct(none_t)}, {status}.{conv}"
        )
    sc_t = _top1(records, "sincos2d", "patch", "extrapolate", train_res)
    sc_e, sc_i = (_top1(records, "sincos2d", "patch", m, big) for m in ("extrapolate", "interpolate"))
    if sc_t is not None and sc_e is not None and sc_i is not None:
        out.append(
            f"**Fixed sin-cos.** At {big} px, extrapolated sin-cos positions give {pct(sc_e)} and positions "
            f"interpolated onto the trained range {pct(sc_i)} ({pct(sc_t)} at {train_res} px)."
        )
    if small < train_res:
        rows = [(r["scheme"], r["stem"]) for r in records]
        lines = []
        for scheme, stem in dict.fromkeys(rows):
            b = _best(records, scheme, stem, small)
            if b:
                lines.append(f"{scheme}/{stem} {pct(b[1])} (`{b[0]}`)")
        out.append(f"**Smaller than trained** ({small} px, best method each): " + ", ".join(lines) + ".")
    out.append(
        "These are small models trained briefly on a synthetic position task, one seed each; differences of a point "
        "or two are within run-to-run noise, and the published figures come from ImageNet-scale training."
    )
    return "\n\n".join(out)


def _runs_table(results: list[dict], img_size: int) -> str:
    head = (
        f"| run | best val top-1 (%) | test top-1 at {img_size} px, best checkpoint (%) | train time (s) |\n"
        "|---|---:|---:|---:|\n"
    )
    return head + "\n".join(
        f"| {r['pos']}/{r['stem']} | {100 * r['best_val_top1']:.1f} "
        f"| {100 * r['test'].get('test/top1', float('nan')):.1f} | {r['train_seconds']:.0f} |"
        for r in results
    )


def _square(records: list[dict], scheme: str, stem: str, method: str) -> dict[int, float]:
    return {
        r["height"]: r["top1"]
        for r in records
        if (r["scheme"], r["stem"], r["method"]) == (scheme, stem, method) and r["height"] == r["width"]
    }


def plot_multires(single: list[dict], multi: list[dict], train_resolutions: list[int], path: Path) -> None:
    """One panel per run: every method, single-resolution training solid, multi-resolution dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    twins = {(r["scheme"], r["stem"]) for r in multi}
    runs = [k for k in dict.fromkeys((r["scheme"], r["stem"]) for r in single) if k in twins]
    ncols = 4
    nrows = -(-len(runs) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.6 * nrows), sharex=True, sharey=True,
                             squeeze=False)  # fmt: skip
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (scheme, stem) in zip(axes.flat, runs, strict=False):
        ax.axvspan(min(train_resolutions), max(train_resolutions), color="0.92", zorder=0)
        methods = dict.fromkeys(r["method"] for r in single if (r["scheme"], r["stem"]) == (scheme, stem))
        for j, m in enumerate(methods):
            for recs, style, tag in ((single, "-", "single"), (multi, "--", "multi")):
                pts = sorted(_square(recs, scheme, stem, m).items())
                ax.plot([x for x, _ in pts], [100 * y for _, y in pts], color=colours[j % len(colours)],
                        linestyle=style, marker="o", markersize=3, label=f"{m} · {tag}")  # fmt: skip
        ax.set_title(f"{scheme}/{stem}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    for ax in list(axes.flat)[len(runs) :]:
        ax.set_visible(False)
    fig.supxlabel(f"test resolution (px); shaded: the multi-resolution training range {train_resolutions}")
    fig.supylabel("top-1 (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def multires_section(args: argparse.Namespace, single: list[dict], multi: list[dict], multi_results: list[dict],
                     docs: Path) -> str:  # fmt: skip
    """The single- vs multi-resolution comparison: table, verdicts, plot, runs."""
    trs = list(args.train_resolutions)
    plot_multires(single, multi, trs, docs / "resolution_multires.png")
    cols = sorted({r["height"] for r in single if r["height"] == r["width"]})
    big = max(cols)
    unseen = [c for c in cols if c > max(trs) or c < min(trs)]
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    lines = [
        "| scheme/stem | method | "
        + " | ".join(f"{c}{' (train)' if c == args.img_size else ''}" for c in cols)
        + f" | change at {big} |",
        "|---|---|" + "---:|" * (len(cols) + 1),
    ]
    better = worse = 0
    deltas_big, deltas_train, verdicts, deltas_default = [], [], [], []
    twins = {(r["scheme"], r["stem"]) for r in multi}
    for scheme, stem in [k for k in dict.fromkeys((r["scheme"], r["stem"]) for r in single) if k in twins]:
        methods = list(dict.fromkeys(r["method"] for r in single if (r["scheme"], r["stem"]) == (scheme, stem)))
        for m in methods:
            a, b = _square(single, scheme, stem, m), _square(multi, scheme, stem, m)
            cells = [f"{pct(a[c])} → {pct(b[c])}" if c in a and c in b else "" for c in cols]
            change = f"{100 * (b[big] - a[big]):+.1f}" if big in a and big in b else ""
            lines.append(f"| {scheme}/{stem} | {m} | " + " | ".join(cells) + f" | {change} |")
        # Verdict per run on its best method at each resolution (the same choice for both trainings).
        best = lambda recs, c: max(_square(recs, scheme, stem, m).get(c, float("nan")) for m in methods)  # noqa: E731,B023
        d_big, d_train = best(multi, big) - best(single, big), best(multi, args.img_size) - best(single, args.img_size)
        deltas_big.append(d_big)
        a0, b0 = _square(single, scheme, stem, methods[0]), _square(multi, scheme, stem, methods[0])
        if big in a0 and big in b0:
            deltas_default.append((f"{scheme}/{stem} `{methods[0]}`", b0[big] - a0[big]))
        deltas_train.append(d_train)
        better += d_big > 0.01
        worse += d_big < -0.01
        verdicts.append(f"{scheme}/{stem} {100 * d_big:+.1f}")
    deltas_big.sort()
    default_changes = ", ".join(f"{k} {100 * d:+.1f}" for k, d in deltas_default)
    missing = [f"{a}/{b}" for a, b in dict.fromkeys((r["scheme"], r["stem"]) for r in single) if (a, b) not in twins]
    skipped = f" Not retrained this way (yet): {', '.join(missing)}." if missing else ""
    median = deltas_big[len(deltas_big) // 2]
    table = "\n".join(lines)
    return f"""## Multi-resolution training

The same runs trained again with `--train-resolutions {" ".join(map(str, trs))}`: every batch at one of those
resolutions, drawn per batch from a generator seeded by (seed, epoch, batch), so all ranks agree; same images,
epochs, seed and model; validation at {args.img_size} px. `shapes` renders natively at each training resolution.
Swept the same way ([resolution_multires.json](resolution_multires.json)). Resolutions outside {min(trs)}-{max(trs)} px
({", ".join(map(str, unseen))}) were seen by neither training. During multi-resolution training each scheme serves
the other grids with its default (first-listed) method, e.g. `extrapolate` for the RoPE schemes and `bicubic` for the
learned table, so that method is the one the model has learnt to use at other sizes.{skipped}

### Top-1 (%): single-resolution → multi-resolution training

{table}

![single vs multi-resolution training](resolution_multires.png)

Change at {big} px with each run's best method (points): {", ".join(verdicts)}. Multi-resolution training
raised the {big} px accuracy by more than a point for {better} of {len(verdicts)} runs and lowered it by more than a
point for {worse} (median change {100 * median:+.1f} points); at the training resolution itself the median change is
{100 * sorted(deltas_train)[len(deltas_train) // 2]:+.1f} points. With the default method, the one each model used
for the other sizes during training, the change at {big} px is: {default_changes}.
ResFormer (Tian et al. 2023) and FlexiViT (Beyer et
al. 2023) report that training on several resolutions (or patch sizes) at once makes a ViT hold its accuracy at
sizes it was not trained at; the numbers above say for which schemes that holds here (one seed each: differences of a
point or two are within run-to-run noise).

### Multi-resolution training runs

Train times are wall seconds on this 2-core machine while other benchmarks shared it (one thread per run).

{_runs_table(multi_results, args.img_size)}
"""


def write_doc(args: argparse.Namespace, argv: list[str], results: list[dict], sweep_dir: Path, seconds: float,
              multi_results: list[dict] = ()) -> Path:  # fmt: skip
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    records = load_records(sweep_dir)
    for name in ("resolution.json", "resolution.png", "resolution.csv"):
        shutil.copyfile(sweep_dir / name, docs / name)
    cfg = Config()
    m, d, o = cfg.model, cfg.data, cfg.optim
    epochs = args.epochs if args.epochs is not None else o.epochs
    train_size = args.train_size if args.train_size is not None else d.train_size
    command = shlex.join(["python", "benchmarks/resolution_transfer.py", *argv])
    runs = _runs_table(results, args.img_size)
    multi = ""
    if multi_results:
        multi_dir = sweep_dir.parent / "resolution-multires"
        for ext in ("json", "csv"):
            shutil.copyfile(multi_dir / f"resolution.{ext}", docs / f"resolution_multires.{ext}")
        multi = "\n" + multires_section(args, records, load_records(multi_dir), multi_results, docs)
    samples = sorted({r["samples"] for r in records})
    text = f"""# Resolution transfer

Produced by

```
{command}
```

({time.strftime("%Y-%m-%d")}; training times per run are listed at the end, and this invocation took
{seconds / 60:.0f} min, reusing finished runs and sweeps). Each scheme is trained at {args.img_size} px on
the embedded `shapes` set ({train_size} generated images, {epochs} epoch(s), dim {m.embed_dim}, depth {m.depth},
{m.num_heads} heads, patch {m.patch_size}, seed {args.seed}; the rest as `python train.py` defaults) and then tested,
without fine-tuning, on the {args.split} split ({", ".join(map(str, samples))} images) rendered natively at each
resolution, with every transfer method its scheme offers (`python -m vitpos.evaluate`, from `last.ckpt`).

## Top-1 (%) by test resolution

Bold: the training resolution. At the training resolution every method is the trained model itself.

{markdown_table(records)}
![top-1 vs resolution](resolution.png)

The numbers are in [resolution.json](resolution.json) / [resolution.csv](resolution.csv);
`notebooks/resolution_transfer.ipynb` draws them.

## Against the published findings

{findings(records, args.img_size)}

## Training runs

{runs}
{multi}"""
    (docs / "resolution.md").write_text(text)
    return docs / "resolution.md"


def sweep(args: argparse.Namespace, results: list[dict], sweep_dir: Path) -> None:
    """Sweep the runs' last checkpoints with the evaluator, unless an identical finished sweep is there."""
    cmd = ["-m", "vitpos.evaluate", "--ckpt", *[r["ckpt"] for r in results], "--resolutions", *args.resolutions,
           "--split", args.split, "--accelerator", args.accelerator, "--devices", str(args.devices),
           "--strategy", args.strategy, "--out", str(sweep_dir), "--overwrite",
           *(["--limit", str(args.eval_limit)] if args.eval_limit else [])]  # fmt: skip
    if not args.retrain and finished_sweep(cmd, [r["ckpt"] for r in results], sweep_dir):
        print(f"reusing the finished sweep in {sweep_dir}", flush=True)
        return
    _run([sys.executable, *cmd])
    record_sweep(cmd, sweep_dir)


def finished_sweep(cmd: list[str], ckpts: list[str], sweep_dir: Path) -> bool:
    """Whether ``sweep_dir`` holds a finished sweep that ``cmd`` made after every checkpoint was last written.

    Shared by the benchmarks that sweep: a rerun of the same command on unchanged checkpoints reuses it.
    The manifest names the command, not the vitpos version: after a change that alters evaluation, delete the
    sweep folder (or pass ``--retrain`` here) to sweep again.
    """
    done, manifest = sweep_dir / "resolution.json", sweep_dir / "command.json"
    return (
        done.is_file()
        and manifest.is_file()
        and json.loads(manifest.read_text()) == cmd
        and all(Path(c).stat().st_mtime < done.stat().st_mtime for c in ckpts)
    )


def record_sweep(cmd: list[str], sweep_dir: Path) -> None:
    """Write the manifest that lets ``finished_sweep`` recognise this sweep."""
    (sweep_dir / "command.json").write_text(json.dumps(cmd) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out)
    if not out.is_absolute():
        out = ROOT / out
    start = time.perf_counter()
    specs = list(dict.fromkeys(args.schemes))
    results = [train(args, spec, out) for spec in specs]
    sweep(args, results, out / "resolution")
    multi: list[dict] = []
    if args.train_resolutions:
        multi_specs = [sp for sp in dict.fromkeys(args.multires_schemes or specs)]
        multi = [train(args, spec, out, args.train_resolutions) for spec in multi_specs]
        sweep(args, multi, out / "resolution-multires")
    doc = write_doc(args, argv, results, out / "resolution", time.perf_counter() - start, multi)
    print(f"wrote {doc}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
