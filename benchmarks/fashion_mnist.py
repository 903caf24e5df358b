"""The position-scheme study on Fashion-MNIST (real data, offline): writes docs/fashion_mnist.md.

    apt-get install dataset-fashion-mnist              # the data, once (Debian's package; no download)
    python benchmarks/fashion_mnist.py --jobs 2        # the full study on this 2-core CPU
    python benchmarks/fashion_mnist.py --schemes rope2d none:conv --epochs 1 --extra-seeds \\
        --recipe '' --eval-limit 200 --out /tmp/fm --docs /tmp/fm/docs   # a quick check

Three parts, every training a ``python train.py --config configs/fashion_mnist.yaml ...`` run:

1. The recipe: ``--recipe`` (rope2d with the conv stem) with the config's full budget, the run that shows what the
   CPU recipe reaches (test top-1 at 28 px and wall time).
2. The study: every registry scheme with the patch stem, plus ``none`` with the conv stem, with one shorter budget
   (``--epochs``) and seed 0; then the ``--top`` rows by validation top-1 again with each ``--extra-seeds`` seed,
   so the table can say how large the seed-to-seed spread is.
3. Resolution transfer: the seed-0 runs and the recipe run, trained at 28 px, tested at 20-56 px with a
   whole-image resize and every transfer method (``python -m vitpos.evaluate --resize full``).

A finished run (results.json) or sweep is reused, so an interrupted study continues where it stopped.
``--jobs J`` trains J runs at once with cores/J threads each (wall times then include the sharing).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, finished_sweep, machine, record_sweep  # noqa: E402  (benchmarks/ is on sys.path as a script)
from common import env as _env

from vitpos import POS_SCHEMES
from vitpos.checkpoint import model_from_checkpoint
from vitpos.config import Config
from vitpos.evaluate import load_records, markdown_table

CONFIG = "configs/fashion_mnist.yaml"
DEFAULT_RUNS = [f"{pos}:patch" for pos in POS_SCHEMES] + ["none:conv"]
RESOLUTIONS = ["20", "28", "36", "44", "56"]
# The data set's README (zalandoresearch/fashion-mnist), as quoted in ../shared/guide/references.md.
REFERENCES = {"small CNNs": (0.90, 0.94), "WRN-40-4": 0.967, "human": 0.835}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", nargs="+", default=DEFAULT_RUNS, metavar="POS[:STEM]")
    p.add_argument("--epochs", type=int, default=1, help="the study's budget per run (epochs of 55,000 images)")
    p.add_argument("--extra-seeds", type=int, nargs="*", default=[1], help="seeds trained again for the top rows")
    p.add_argument("--top", type=int, default=3, help="rows (by seed-0 validation top-1) that get the extra seeds")
    p.add_argument("--recipe", default="rope2d:conv", metavar="POS[:STEM]",
                   help="run trained with the config's full budget ('' = skip)")  # fmt: skip
    p.add_argument("--resolutions", nargs="+", default=RESOLUTIONS)
    p.add_argument("--eval-limit", type=int, default=2000, help="transfer sweep on the first N test images (0 = all)")
    p.add_argument("--jobs", type=int, default=1, help="trainings at once (threads each: cores / jobs)")
    p.add_argument("--eval-devices", type=int, default=1, help="processes for the transfer sweep (DDP on CPUs)")
    p.add_argument("--threads", type=int, help="threads per training (default: cores / jobs)")
    p.add_argument("--data-dir", help="where the idx files are (default: the Debian package's folder)")
    p.add_argument("--out", default="runs/bench-fmnist")
    p.add_argument("--docs", default=str(ROOT / "docs"))
    args = p.parse_args(argv)
    for spec in args.schemes + ([args.recipe] if args.recipe else []):
        pos, _, stem = spec.partition(":")
        if pos not in POS_SCHEMES or (stem or "patch") not in ("patch", "conv"):
            p.error(f"bad run '{spec}': POS[:STEM] with POS in {', '.join(POS_SCHEMES)}, STEM patch or conv")
    if args.epochs < 1 or args.jobs < 1 or args.top < 0:
        p.error("--epochs and --jobs must be >= 1, --top >= 0")
    return args


class Runner:
    """Trains runs (reusing finished ones), J at a time, each with its share of the cores."""

    def __init__(self, args: argparse.Namespace, out: Path):
        self.args, self.out = args, out
        self.threads = args.threads or max(1, len(os.sched_getaffinity(0)) // args.jobs)
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def run_dir(self, pos: str, stem: str, seed: int, recipe: bool = False) -> Path:
        return self.out / f"{'recipe-' if recipe else ''}{pos}-{stem}-s{seed}"

    def train(self, pos: str, stem: str, seed: int, recipe: bool = False) -> None:
        """Train one run unless it is finished; the caller holds its lock."""
        run_dir = self.run_dir(pos, stem, seed, recipe)
        if (run_dir / "results.json").is_file():
            return
        cmd = [sys.executable, "train.py", "--config", CONFIG, "--pos", pos, "--stem", stem, "--seed", str(seed),
               "--out", str(run_dir)]  # fmt: skip
        if not recipe:  # the recipe shortened: epochs, and the warm-up in proportion
            o = Config.from_yaml(ROOT / CONFIG).optim
            warmup = o.warmup_epochs * self.args.epochs / o.epochs
            cmd += ["--epochs", str(self.args.epochs), "--warmup-epochs", f"{warmup:g}"]
        if self.args.data_dir:
            cmd += ["--data-dir", self.args.data_dir]
        if run_dir.exists():
            cmd.append("--overwrite")  # an unfinished run that nobody holds: train.py moves it aside
        log = self.out / "logs" / f"{run_dir.name}.log"
        env = _env() | {"OMP_NUM_THREADS": str(self.threads)}
        print(f"+ {shlex.join(cmd)}   (log: {log}, {self.threads} thread(s))", flush=True)
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
            # The lock names the training process, so the run stays claimed if this invocation is stopped.
            (self.out / "logs" / f"{run_dir.name}.lock").write_text(str(proc.pid))
            if proc.wait():
                raise subprocess.CalledProcessError(proc.returncode, cmd)

    def _lock(self, run_dir: Path) -> bool:
        """Claim a run for this process (False: another live process holds it)."""
        lock = self.out / "logs" / f"{run_dir.name}.lock"
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    os.kill(int(lock.read_text() or 0), 0)
                    return False  # held by a live process
                except (ProcessLookupError, ValueError):
                    lock.unlink(missing_ok=True)  # stale: its process is gone
                    continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return True
        return False

    def train_all(self, jobs: list[tuple]) -> list[dict]:
        """Train the jobs, `--jobs` at a time; runs that another invocation is training are left to it and
        waited for, so several invocations (e.g. one per free core) can share one study."""
        pending, guard = list(jobs), threading.Lock()

        def worker() -> None:
            while True:
                with guard:
                    job = next((j for j in pending if self._lock(self.run_dir(*j))), None)
                    if job is None:
                        if not pending:
                            return
                    else:
                        pending.remove(job)
                if job is None:  # everything left is being trained elsewhere
                    time.sleep(10)
                    with guard:
                        pending[:] = [j for j in pending if not (self.run_dir(*j) / "results.json").is_file()]
                    continue
                try:
                    self.train(*job)
                finally:
                    (self.out / "logs" / f"{self.run_dir(*job).name}.lock").unlink(missing_ok=True)

        with ThreadPoolExecutor(self.args.jobs) as pool:
            for f in [pool.submit(worker) for _ in range(self.args.jobs)]:
                f.result()
        return [self.result(*j) for j in jobs]

    def result(self, pos: str, stem: str, seed: int, recipe: bool = False) -> dict:
        run_dir = self.run_dir(pos, stem, seed, recipe)
        res = json.loads((run_dir / "results.json").read_text())
        return res | {"seed": seed, "recipe": recipe, "run_dir": str(run_dir), "curve": val_curve(run_dir)}


def val_curve(run_dir: Path) -> list[float]:
    """Validation top-1 per epoch, from the run's CSV log."""
    path = run_dir / "logs" / "metrics.csv"
    if not path.is_file():
        return []
    with open(path) as fh:
        return [float(row["val/top1"]) for row in csv.DictReader(fh) if row.get("val/top1")]


def sweep(args: argparse.Namespace, runs: list[dict], sweep_dir: Path) -> list[dict]:
    ckpts = [str(Path(r["run_dir"]) / "checkpoints" / "last.ckpt") for r in runs]
    cmd = ["-m", "vitpos.evaluate", "--ckpt", *ckpts, "--resolutions", *args.resolutions, "--split", "test",
           "--resize", "full", "--accelerator", "cpu", "--out", str(sweep_dir), "--overwrite",
           *(["--devices", str(args.eval_devices), "--strategy", "ddp"] if args.eval_devices > 1 else []),
           *(["--limit", str(args.eval_limit)] if args.eval_limit else [])]  # fmt: skip
    if finished_sweep(cmd, ckpts, sweep_dir):
        print(f"reusing the finished sweep in {sweep_dir}", flush=True)
    else:
        print("+", shlex.join(["python", *cmd]), flush=True)
        threads = max(1, len(os.sched_getaffinity(0)) // args.eval_devices)  # no oversubscription under DDP
        subprocess.run([sys.executable, *cmd], cwd=ROOT, env=_env() | {"OMP_NUM_THREADS": str(threads)}, check=True)
        record_sweep(cmd, sweep_dir)
    return load_records(sweep_dir)


# -- the report -----------------------------------------------------------------------------------
def _label(r: dict) -> str:
    return f"{r['pos']}/{r['stem']}"


def _test(r: dict) -> float:
    return r["test"]["test/top1"]


def study_table(study: list[dict], n_params: dict[str, int]) -> tuple[str, list[str], float | None]:
    """Rows sorted by mean test top-1; returns the table, the row order and the largest seed spread."""
    by_run: dict[str, list[dict]] = {}
    for r in study:
        by_run.setdefault(_label(r), []).append(r)
    seeds = sorted({r["seed"] for r in study})
    order = sorted(by_run, key=lambda k: -sum(map(_test, by_run[k])) / len(by_run[k]))
    lines = [
        "| scheme/stem | params | " + " | ".join(f"test top-1, seed {s}" for s in seeds)
        + " | mean | spread | best val top-1 (seed 0) | wall time (s, seed 0) |",
        "|---|---:|" + "---:|" * (len(seeds) + 4),
    ]  # fmt: skip
    spreads = []
    for k in order:
        rs = {r["seed"]: r for r in by_run[k]}
        vals = [_test(r) for r in rs.values()]
        spread = max(vals) - min(vals) if len(vals) > 1 else None
        if spread is not None:
            spreads.append(spread)
        cells = [f"{100 * _test(rs[s]):.2f}" if s in rs else "" for s in seeds]
        first = rs[min(rs)]
        lines.append(
            f"| {k} | {n_params.get(k, 0) / 1e6:.2f}M | " + " | ".join(cells)
            + f" | {100 * sum(vals) / len(vals):.2f} | {'' if spread is None else f'{100 * spread:.2f}'} "
            f"| {100 * first['best_val_top1']:.2f} | {first['train_seconds']:.0f} |"
        )  # fmt: skip
    return "\n".join(lines), order, (max(spreads) if spreads else None)


def _top1(records: list[dict], scheme: str, stem: str, method: str, res: int) -> float | None:
    for r in records:
        if (r["scheme"], r["stem"], r["method"], r["height"]) == (scheme, stem, method, res):
            return r["top1"]
    return None


def _best_at(records: list[dict], scheme: str, stem: str, res: int) -> tuple[str, float] | None:
    rs = [r for r in records if (r["scheme"], r["stem"], r["height"]) == (scheme, stem, res)]
    return (max(rs, key=lambda r: r["top1"])["method"], max(r["top1"] for r in rs)) if rs else None


def findings(study: list[dict], order: list[str], spread: float | None, records: list[dict],
             recipe: dict | None) -> str:  # fmt: skip
    """Paragraphs that hold the measurements against the published findings (generated from the numbers)."""
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731
    mean = {k: [_test(r) for r in study if _label(r) == k] for k in order}
    mean = {k: sum(v) / len(v) for k, v in mean.items()}
    noise = spread if spread is not None else 0.0
    out = []
    best = order[0]
    if recipe is not None:
        lo, hi = REFERENCES["small CNNs"]
        t = _test(recipe)
        where = (
            "above the small CNNs' range" if t > hi
            else "within the small CNNs' range" if t >= lo else "below the small CNNs' range"
        )  # fmt: skip
        out.append(
            f"**Against the data set's own references.** The CPU recipe ({_label(recipe)}, "
            f"{recipe['epochs']} epochs, {recipe['train_seconds'] / 60:.0f} min) reaches {pct(t)} test top-1: "
            f"{where} ({100 * lo:.0f}-{100 * hi:.0f} %), above human performance ({pct(REFERENCES['human'])}) and "
            f"below WRN-40-4 ({pct(REFERENCES['WRN-40-4'])}), which is a far larger network trained far longer."
        )
    top_gap = mean[order[0]] - mean[order[1]] if len(order) > 1 else 0.0
    out.append(
        f"**Which scheme is best.** With the study budget, {best} has the highest mean test top-1 "
        f"({pct(mean[best])}), {100 * top_gap:.2f} points above {order[1] if len(order) > 1 else '-'}; the largest "
        f"seed-to-seed spread among the rows trained twice is {100 * noise:.2f} points. "
        + (
            "The lead is larger than that spread."
            if top_gap > noise
            else "The lead is within that spread, so these seeds do not separate the top rows."
        )
    )
    none_k, conv_k = "none/patch", "none/conv"
    positioned = [k for k in order if k not in (none_k, conv_k)]
    if none_k in mean and positioned:
        gap = mean[positioned[0]] - mean[none_k]
        conv = f"; the conv stem's zero padding brings `none` to {pct(mean[conv_k])}" if conv_k in mean else ""
        peg = ""
        if "peg/patch" in mean:
            peg = f", and PEG alone (a zero-padded depthwise conv) to {pct(mean['peg/patch'])}"
        out.append(
            f"**No position (CPVT, DeiT).** DeiT-tiny without position loses about 4 points on ImageNet and a "
            f"zero-padded PEG recovers them. Here `none` with the patch stem, a bag of 49 patches, scores "
            f"{pct(mean[none_k])}, {100 * gap:.1f} points below the best positioned scheme{conv}{peg}: "
            + (
                "position matters more here than DeiT's ~4 points, at least this early in training (one epoch)."
                if gap > 0.04
                else "a loss no larger than DeiT's ~4 points."
            )
        )
    records = [r for r in records if "/recipe-" not in r["checkpoint"]]  # the study's runs only
    rope = _best_at(records, "rope2d", "patch", 56)
    rope28 = _top1(records, "rope2d", "patch", "extrapolate", 28)
    learned56 = _top1(records, "learned", "patch", "bicubic", 56)
    learned28 = _top1(records, "learned", "patch", "bicubic", 28)
    if rope and rope28 is not None and learned56 is not None and learned28 is not None:
        rd, ld = rope[1] - rope28, learned56 - learned28
        verdict = (
            "reproduces" if rd > ld + noise else "does not reproduce" if rd < ld - noise else "cannot separate"
        )  # fmt: skip
        out.append(
            f"**RoPE vs a resampled learned table (RoPE-ViT).** From 28 to 56 px (2x, whole-image resize) rope2d "
            f"goes {pct(rope28)} -> {pct(rope[1])} with `{rope[0]}` ({100 * rd:+.1f} points) and the learned table "
            f"(bicubic) {pct(learned28)} -> {pct(learned56)} ({100 * ld:+.1f} points): this {verdict} the published "
            "finding that RoPE holds accuracy beyond the training resolution better than an absolute table. "
            "Note that a whole-image resize makes the garment bigger, unlike a crop at higher resolution."
        )
    peg56, peg28 = _top1(records, "peg", "patch", "conv", 56), _top1(records, "peg", "patch", "conv", 28)
    if peg56 is not None and peg28 is not None and learned56 is not None and learned28 is not None:
        pd, ld = peg56 - peg28, learned56 - learned28
        verdict = "reproduces" if pd > ld + noise else "does not reproduce" if pd < ld - noise else "cannot separate"
        out.append(
            f"**PEG vs a learned table at a larger size (CPVT).** CPVT-Ti gains when tested at 384 px (73.4 -> 74.2) "
            f"while DeiT-tiny's learned table loses (72.2 -> 71.2). Here from 28 to 56 px PEG goes {pct(peg28)} -> "
            f"{pct(peg56)} ({100 * pd:+.1f} points) and the learned table {pct(learned28)} -> {pct(learned56)} "
            f"({100 * ld:+.1f} points): this {verdict} that finding. The garment doubles in size at 56 px, a larger "
            "step than CPVT's 224 -> 384 (1.7x), and a 3x3 convolution sees its edges at a new scale."
        )
    out.append(
        f"**Budget.** The study's runs are one epoch long; the recipe run shows where ten epochs take one scheme "
        f"({pct(_test(recipe)) if recipe is not None else '-'}). Rankings this early favour schemes that learn "
        "fast (a learned table or bias starts near zero and needs steps to grow), and with two seeds per row the "
        "spread is a rough estimate."
    )
    out.append(
        "Transfer rows come from one seed each and the first images of the test split (see above): read differences "
        f"of less than about {max(1.0, 100 * noise):.1f} points as noise."
    )
    return "\n\n".join(out)


def write_doc(args: argparse.Namespace, argv: list[str], recipe: dict | None, study: list[dict],
              records: list[dict], sweep_dir: Path, seconds: float) -> Path:  # fmt: skip
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    for ext in ("json", "csv", "png"):
        shutil.copyfile(sweep_dir / f"resolution.{ext}", docs / f"fashion_mnist_resolution.{ext}")
    cfg = Config.from_yaml(ROOT / CONFIG)
    m, d, o = cfg.model, cfg.data, cfg.optim
    n_params = {}
    for r in study:
        _, model = model_from_checkpoint(Path(r["run_dir"]) / "checkpoints" / "last.ckpt")
        n_params[_label(r)] = sum(p.numel() for p in model.parameters())
    table, order, spread = study_table(study, n_params)
    command = shlex.join(["python", "benchmarks/fashion_mnist.py", *argv])
    samples = sorted({r["samples"] for r in records})
    recipe_text = ""
    if recipe is not None:
        curve = ", ".join(f"{100 * v:.1f}" for v in recipe["curve"])
        first = next((i + 1 for i, v in enumerate(recipe["curve"]) if v >= 0.91), None)
        reached = (
            f"Validation top-1 first reaches 91 % after epoch {first} (of {recipe['epochs']})."
            if first
            else "Validation top-1 never reaches 91 %."
        )
        recipe_text = f"""## The CPU recipe

`python train.py --config {CONFIG} --pos {recipe["pos"]} --stem {recipe["stem"]} --seed {recipe["seed"]}`:
**{100 * _test(recipe):.2f} % test top-1** at 28 px (10,000 test images, best checkpoint by validation),
{recipe["epochs"]} epochs in {recipe["train_seconds"] / 60:.1f} min of training on one core of this CPU (the other ran
other benchmarks; the wall time includes that sharing).
Validation top-1 (%) per epoch: {curve}. {reached}
"""
    text = f"""# Fashion-MNIST: the position-scheme study on real data

Produced by

```
{command}
```

on {time.strftime("%Y-%m-%d")} ({machine()["cpu"]}, {len(os.sched_getaffinity(0))} cores, fp32, {args.jobs}
training(s) at
once with {args.threads or max(1, len(os.sched_getaffinity(0)) // args.jobs)} thread(s) each, alongside other
jobs on this machine, so wall times include that sharing; this
invocation took {seconds / 60:.0f} min, reusing finished runs). Data: Debian's `dataset-fashion-mnist` (the original
idx files, read offline): 55,000 train / 5,000 validation (carved from train, seed 0) / 10,000 test, 28 px grayscale,
normalised with the set's own mean and std. Model and recipe: [`{CONFIG}`](../{CONFIG}): dim {m.embed_dim},
depth {m.depth}, {m.num_heads} heads, patch {m.patch_size} (a 7x7 grid), global average pooling, AdamW lr {o.lr}
(wd {o.weight_decay}, {o.warmup_epochs:g} warmup epoch, cosine), batch {d.batch_size}, label smoothing
{o.label_smoothing}, random crop (pad {d.random_crop_pad}), horizontal flip, random erasing {d.random_erasing}.

{recipe_text}
## Every scheme, same recipe and budget

{args.epochs} epoch(s) ({args.epochs * 55000 // d.batch_size} steps) per run: the recipe above with the patch stem
(and the conv stem for `none/conv`), shortened (epochs and warm-up in proportion) so that all {len(order)} runs fit
this session's CPU time. Seed 0 for every run; the {args.top} best by seed-0 *validation* top-1
again with seed(s) {", ".join(map(str, args.extra_seeds)) or "-"}. Test top-1 (%) at 28 px on all 10,000 test images,
from the best checkpoint by validation.

{table}

## Resolution transfer (trained at 28 px)

Whole-image resize to each resolution (`--resize full`), every transfer method, on the first
{", ".join(map(str, samples))} test images, from each seed-0 run's `last.ckpt` (and the recipe run's).

{markdown_table(records)}
![top-1 vs resolution](fashion_mnist_resolution.png)

Numbers: [fashion_mnist_resolution.json](fashion_mnist_resolution.json) /
[.csv](fashion_mnist_resolution.csv).

## Against the published findings

{findings(study, order, spread, records, recipe)}
"""
    (docs / "fashion_mnist.md").write_text(text)
    return docs / "fashion_mnist.md"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out)
    out = out if out.is_absolute() else ROOT / out
    start = time.perf_counter()
    runner = Runner(args, out)
    specs = [(s.partition(":")[0], s.partition(":")[2] or "patch") for s in dict.fromkeys(args.schemes)]
    recipe_pos, _, recipe_stem = args.recipe.partition(":")
    jobs = [(recipe_pos, recipe_stem or "patch", 0, True)] if args.recipe else []
    done = runner.train_all(jobs + [(pos, stem, 0) for pos, stem in specs])
    recipe = done[0] if args.recipe else None
    study = done[1:] if args.recipe else done
    top = sorted(study, key=lambda r: -r["best_val_top1"])[: args.top]
    study += runner.train_all([(r["pos"], r["stem"], s) for r in top for s in args.extra_seeds])
    seed0 = [r for r in study if r["seed"] == 0]
    sweep_dir = out / "resolution"
    records = sweep(args, seed0 + ([recipe] if recipe else []), sweep_dir)
    doc = write_doc(args, argv, recipe, study, records, sweep_dir, time.perf_counter() - start)
    print(f"wrote {doc}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
