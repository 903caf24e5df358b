"""Diagnostics of one checkpoint per scheme: pictures in docs/diagnostics/<run>/, the summary in JSON.

    python benchmarks/results.py         # the runs this reads (runs/bench-shapes/<pos>-<stem>-lr<X>-seed<K>)
    python benchmarks/diagnostics.py     # docs/diagnostics.json and docs/diagnostics/<run>/
    python benchmarks/render.py          # docs/diagnostics.md

``vitpos.diagnose.diagnose`` on ``last.ckpt`` of every finished run matching ``--pattern``: patch-shuffle top-1,
attention distance per block, pictures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import ROOT, write_record  # noqa: E402  (benchmarks/ is on sys.path as a script)

from vitpos.config import Config
from vitpos.diagnose import diagnose


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="runs/bench-shapes", help="folder of finished runs (results.json)")
    p.add_argument("--docs", default=str(ROOT / "docs"), help="pictures go to DOCS/diagnostics/<run>/")
    p.add_argument("--num-images", type=int, default=256)
    p.add_argument("--pattern", default=f"*-lr{Config().optim.pos_lr_scale:g}-seed0", help="run folder names")
    a = p.parse_args(argv)
    runs = sorted(d for d in Path(a.runs).glob(a.pattern) if (d / "results.json").is_file())
    if not runs:
        sys.exit(f"diagnostics.py: error: no finished runs in {a.runs}; run benchmarks/results.py first")
    records = []
    for run in runs:
        out = Path(a.docs, "diagnostics", run.name)
        s = diagnose(run / "checkpoints" / "last.ckpt", out, num_images=a.num_images, overwrite=True)
        records.append({"run": run.name, "patch_shuffle": s["patch_shuffle"], "pictures": s["pictures"],
                        "attention_distance": s["mean_attention_distance_per_block"]})  # fmt: skip
    write_record(Path(a.docs, "diagnostics.json"), "diagnostics.py", argv, num_images=a.num_images, runs=records)


if __name__ == "__main__":
    main()
