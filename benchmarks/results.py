"""Train every position scheme on the embedded `shapes` set with the default budget, over seeds; write JSON.

    python benchmarks/results.py                    # docs/results.json; then: python benchmarks/render.py

Each run is ``python train.py --pos P --stem S --seed K`` with nothing else. The six main runs get every seed,
every other scheme the first seed, and the ``--top`` of those by validation top-1 every seed too. Schemes with
position parameters also train with the rule off (``--pos-lr-scale 1``) and at the ``--sweep`` scales; those
without train identically at every scale, so once. A finished run is reused: an interrupted study continues.
"""

from __future__ import annotations

import argparse
import sys

from common import MAIN_RUNS, ROOT, run_specs, study_budget, train_run, write_record  # noqa: E402

from vitpos import POS_SCHEMES, create_model
from vitpos.config import Config

OTHERS = [f"{p}:patch" for p in POS_SCHEMES if f"{p}:patch" not in MAIN_RUNS]
TRIED = ((10, 0), (10, 1), (10, 2), (100, 0))  # (scale, seed) of the runs that chose the default scale
SWEEP = [f"{pos}:patch:{scale}:{seed}" for pos in ("learned", "relbias") for scale, seed in TRIED]


def has_pos_params(pos: str) -> bool:
    return any(True for _ in create_model(pos, embed_dim=16, depth=1, num_heads=4).pos.parameters())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS, metavar="POS:STEM", help="runs with --seeds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--others", nargs="*", default=OTHERS, metavar="POS:STEM", help="runs with seed 0 first")
    p.add_argument("--top", type=int, default=3, help="others (by seed-0 validation top-1) trained with --seeds too")
    p.add_argument("--ablation", nargs="*", metavar="POS:STEM",
                   help="rule-off runs, seed 0 (default: every scheme with position parameters)")  # fmt: skip
    p.add_argument("--sweep", nargs="*", default=SWEEP, metavar="POS:STEM:SCALE:SEED",
                   help="further runs at other scales")  # fmt: skip
    p.add_argument("--out", default="runs/bench-shapes", help="folder of the training runs")
    p.add_argument("--json", default=str(ROOT / "docs" / "results.json"))
    p.add_argument("--retrain", action="store_true")
    args = p.parse_args(argv)
    run_specs(p, args.runs + args.others)
    cfg, out = Config(), ROOT / args.out
    scale = cfg.optim.pos_lr_scale
    with_params = [s for s in dict.fromkeys(args.runs + args.others) if has_pos_params(s.split(":")[0])]
    runs: dict[tuple[str, int, float], dict] = {}  # in the order trained: the pages list them so

    def train(spec: str, seed: int, lr_scale: float) -> None:
        if (spec, seed, lr_scale) in runs:
            return
        pos, _, stem = spec.partition(":")
        flags = ["--pos", pos, "--stem", stem, "--seed", str(seed)]
        if spec in with_params:
            run_dir = out / f"{pos}-{stem}-lr{lr_scale:g}-seed{seed}"
            flags += ["--pos-lr-scale", f"{lr_scale:g}"]
        else:  # no position parameters: the same training at every scale
            run_dir = out / f"{pos}-{stem}-seed{seed}"
        runs[spec, seed, lr_scale] = {"spec": spec, "pos": pos, "stem": stem, "seed": seed,
                                      "pos_lr_scale": lr_scale, "pos_params": spec in with_params,
                                      **train_run(run_dir, flags, args.retrain)}  # fmt: skip

    for spec in args.runs:
        for seed in args.seeds:
            train(spec, seed, scale)
    for spec in args.others:
        train(spec, args.seeds[0], scale)
    top = sorted(args.others, key=lambda s: -runs[s, args.seeds[0], scale]["best_val_top1"])[: args.top]
    for spec in top:
        for seed in args.seeds:
            train(spec, seed, scale)
    for spec in with_params if args.ablation is None else [s for s in args.ablation if s in with_params]:
        train(spec, 0, 1.0)
    for item in args.sweep:
        pos, stem, sweep_scale, seed = item.split(":")
        train(f"{pos}:{stem}", int(seed), float(sweep_scale))
    d = cfg.data
    budget = study_budget(cfg, train_size=d.train_size, val_size=d.val_size, test_size=d.test_size,
                          default_pos_lr_scale=scale)  # fmt: skip
    write_record(args.json, "results.py", argv, budget=budget, top_others=top, runs=list(runs.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
