"""Train every position scheme on the embedded `shapes` set with the default budget; write docs/results.md.

    python benchmarks/results.py                 # every registry scheme (patch stem) + none with the conv stem
    python benchmarks/resolution_transfer.py --out runs/bench-shapes   # then sweeps these same checkpoints

Each run is ``python train.py --pos P --stem S --out runs/bench-shapes/P-S`` with nothing else: the budget a user
gets from ``python train.py --pos P``. A finished run (results.json) is reused unless ``--retrain``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

from resolution_transfer import ROOT, train  # the same training step, so both benchmarks share runs

from vitpos import POS_SCHEMES
from vitpos.config import Config
from vitpos.data.shapes import BAG_OF_PATCHES_CEILING

DEFAULT_RUNS = [f"{pos}:patch" for pos in POS_SCHEMES] + ["none:conv"]


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", nargs="+", default=DEFAULT_RUNS, metavar="POS[:STEM]")
    p.add_argument("--out", default="runs/bench-shapes")
    p.add_argument("--docs", default=str(ROOT / "docs"))
    p.add_argument("--retrain", action="store_true")
    args = p.parse_args(argv)
    # the training step of resolution_transfer.py reads these; None keeps the Config defaults
    targs = argparse.Namespace(img_size=Config().model.img_size, seed=0, accelerator="cpu", devices=1,
                               strategy="auto", epochs=None, train_size=None, retrain=args.retrain)  # fmt: skip
    out = Path(args.out)
    rows = []
    for spec in args.schemes:
        res = train(targs, spec, out)
        pos, _, stem = spec.partition(":")
        cfg = Config.from_yaml(out / f"{pos}-{stem or 'patch'}" / "config.yaml")
        images = cfg.data.train_size * cfg.optim.epochs
        rows.append((pos, stem or "patch", res, images, cfg))
    cfg = rows[0][4]
    lines = [
        "# Every scheme on the embedded `shapes` set, default budget",
        "",
        f"Made by `{shlex.join(['python', 'benchmarks/results.py', *(argv if argv is not None else sys.argv[1:])])}` "
        f"on {time.strftime('%Y-%m-%d')}: {cpu_name()}, {len(__import__('os').sched_getaffinity(0))} cores, "
        f"torch {__import__('torch').__version__}, fp32 on the CPU, one process.",
        "",
        f"Budget (the Config defaults, i.e. `python train.py --pos P` with no other flag): ViT {cfg.model.embed_dim} "
        f"wide, {cfg.model.depth} blocks, {cfg.model.num_heads} heads, patch {cfg.model.patch_size} at "
        f"{cfg.model.img_size} px ({cfg.model.img_size // cfg.model.patch_size}x"
        f"{cfg.model.img_size // cfg.model.patch_size} tokens), {cfg.data.train_size} generated training images, "
        f"{cfg.optim.epochs} epochs, batch {cfg.data.batch_size}, AdamW lr {cfg.optim.lr:g}, seed 0. "
        f"Val and test: {cfg.data.val_size} and {cfg.data.test_size} images. Chance is 12.5 %; a model blind to "
        f"patch order should reach at most {100 * BAG_OF_PATCHES_CEILING:.0f} % (it can tell the reference shape but "
        "not where the circle is); `none` with the patch stem, exactly permutation invariant, measures a few points "
        "above that: the patches still carry a weak cue (see vitpos/data/shapes.py).",
        "",
        "| scheme | stem | best val top-1 | test top-1 (best ckpt) | train time | img/s (train, incl. val) |",
        "|---|---|---|---|---|---|",
    ]
    for pos, stem, res, images, _ in rows:
        test = res.get("test", {}).get("test/top1", float("nan"))
        secs = res["train_seconds"]
        lines.append(
            f"| `{pos}` | {stem} | {100 * res['best_val_top1']:.1f} % | {100 * test:.1f} % | {secs:.0f} s "
            f"| {images / secs:.0f} |"
        )
    lines += [
        "",
        "Train time is the wall time of `Trainer.fit` (training and the per-epoch validation), as `results.json` "
        "records it; the `learned` run shared the CPU with a test run for its first minutes, so its time is inflated. "
        "Per-run folders (config, checkpoints, logs) are under "
        f"`{args.out}/`; `python benchmarks/resolution_transfer.py --out {args.out}` sweeps these checkpoints "
        "(docs/resolution.md).",
    ]
    lines += [
        "",
        "Reading: the schemes whose position is fixed (`sincos2d`, `rope2d`) or starts as a working rotation "
        "(`rope2d-mixed`) or as a small network over offsets (`cpb`, `peg`) solve the task within the budget; the two "
        "that must grow a table from trunc-normal(.02) values (`learned`, `relbias`) are still climbing when it ends "
        "(their validation curves are in each run's logs/metrics.csv); the guide's reference saw the same plateau "
        "for a learned table. The conv stem gives `none` part of the way (zero padding leaks absolute position).",
    ]
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "results.md").write_text("\n".join(lines) + "\n")
    (docs / "results.json").write_text(json.dumps([{"pos": r[0], "stem": r[1], **r[2]} for r in rows], indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
