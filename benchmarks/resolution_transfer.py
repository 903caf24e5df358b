"""Resolution transfer of the `shapes` runs: every checkpoint tested at 24-128 px with every transfer method; JSON.

    python -m benchmarks.results                         # trains the runs (docs/results.json)
    python -m benchmarks.resolution_transfer             # sweeps them: docs/resolution.json
    python -m benchmarks.pages                           # docs/resolution.md and resolution.png

One ``python -m vitpos.evaluate`` sweeps the last checkpoints of docs/results.json's runs at the default position
rule with a seed in ``--seeds``; also YaRN's per-frequency blend and its two attention temperatures. A checkpoint
swept before by the same sweep and unchanged since (same SHA-256) keeps its records, so only new or retrained runs
are evaluated; a run whose checkpoint is gone keeps its records from the JSON this study wrote before, at the
resolutions swept then.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from benchmarks.common import ROOT, at_default_rule, earlier_record, study_here, transfer_study, write_record
from vitpos.pos.rope2d import axial_frequencies, yarn_ramp

RESOLUTIONS = ["24", "32", "48", "64", "96", "128"]
TEMPERATURE_GRIDS = ["48", "64", "32x64", "64x32"]


def yarn_blend(head_dim: int, theta: float, train_len: int, factors: list[float]) -> dict:
    """Per rotary frequency of one axis: gamma (1 keeps the frequency, 0 interpolates it) and f'/f at each factor."""
    f = axial_frequencies(head_dim, theta)
    gamma = yarn_ramp(f, train_len)
    return {"frequencies": f.tolist(), "gamma": gamma.tolist(), "train_len": train_len,
            "ratio": {f"{s:g}": (gamma + (1 - gamma) / s).tolist() for s in factors}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(ROOT / "docs" / "results.json"), help="the runs (benchmarks/results.py)")
    p.add_argument("--resolutions", nargs="+", default=RESOLUTIONS)
    p.add_argument("--limit", type=int, default=300, help="test images per cell")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the seeds every scheme has")
    p.add_argument("--sweep-dir", default="runs/bench-shapes/resolution")
    p.add_argument("--json", default=str(ROOT / "docs" / "resolution.json"))
    args = p.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    b = results["budget"]
    runs = [r for r in results["runs"] if at_default_rule(r, b) and r["seed"] in args.seeds]
    blend = yarn_blend(b["embed_dim"] // b["num_heads"], 100.0, b["img_size"] // b["patch_size"], [1.5, 2])
    earlier = earlier_record(args.json)
    sweep = partial(transfer_study, resolutions=args.resolutions, limit=args.limit, sweep_dir=ROOT / args.sweep_dir,
                    temperature_grids=TEMPERATURE_GRIDS, earlier=earlier)  # fmt: skip
    study = study_here(runs, earlier, sweep)
    write_record(args.json, "resolution_transfer.py", argv, train_resolution=b["img_size"], limit=args.limit,
                 **study, yarn_blend=blend)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
