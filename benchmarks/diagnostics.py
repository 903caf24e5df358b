"""Diagnostics pictures for one checkpoint of each scheme; writes docs/diagnostics.md and docs/diagnostics/<run>/.

    python benchmarks/results.py            # trains the runs this reads (runs/bench-shapes/<pos>-<stem>-lr<X>-seed<K>)
    python benchmarks/diagnostics.py        # then this: pictures + the patch-shuffle table

For every finished run under ``--runs`` whose name matches ``--pattern`` (seed 0 at the default position lr
scale) it calls ``vitpos.diagnose.diagnose`` on ``last.ckpt`` (256 validation
images) and links the pictures from one page, with the patch-shuffle test (top-1 with the patches permuted:
how much each model relies on where its patches are).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from common import ROOT  # noqa: E402  (benchmarks/ is on sys.path as a script)

from vitpos.config import Config
from vitpos.diagnose import diagnose


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="runs/bench-shapes", help="folder of finished runs (results.json)")
    p.add_argument("--docs", default=str(ROOT / "docs"))
    p.add_argument("--num-images", type=int, default=256)
    p.add_argument("--pattern", default=f"*-lr{Config().optim.pos_lr_scale:g}-seed0", help="run folder names")
    args = p.parse_args(argv)
    docs = Path(args.docs)
    runs = sorted(d for d in Path(args.runs).glob(args.pattern) if (d / "results.json").is_file())
    if not runs:
        sys.exit(f"diagnostics.py: error: no finished runs in {args.runs}; run benchmarks/results.py first")
    cmd = shlex.join(["python", "benchmarks/diagnostics.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# Position diagnostics, one checkpoint per scheme",
        "",
        f"Made by `{cmd}` on {time.strftime('%Y-%m-%d')} from the `shapes` runs of `benchmarks/results.py` "
        f"({args.num_images} validation images each). Per run: `python -m vitpos.diagnose --ckpt RUN/checkpoints/"
        "last.ckpt --out docs/diagnostics/RUN`.",
        "",
        "**Patch-shuffle test**: top-1 as the images are, and with the patches permuted (one fixed permutation). "
        "A model that ignores position loses nothing; `shapes` needs position, so a model that solved it drops "
        "towards the 25 % bag-of-patches ceiling. Attention distances are in patches.",
        "",
        "| run | top-1 | top-1, patches shuffled | drop | mean attention distance, first / last block | pictures |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        out = docs / "diagnostics" / run.name
        s = diagnose(run / "checkpoints" / "last.ckpt", out, num_images=args.num_images, overwrite=True)
        sh, dist = s["patch_shuffle"], s["mean_attention_distance_per_block"]
        pics = " ".join(f"[{Path(n).stem}](diagnostics/{run.name}/{n})" for n in s["pictures"])
        lines.append(
            f"| `{run.name}` | {100 * sh['top1']:.1f} % | {100 * sh['top1_shuffled']:.1f} % | "
            f"{100 * sh['drop']:+.1f} pts | {dist[0]:.2f} / {dist[-1]:.2f} | {pics} |"
        )
        print(lines[-1], flush=True)
    (docs / "diagnostics.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
