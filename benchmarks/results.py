"""Train every position scheme on the embedded `shapes` set with the default budget, over seeds; write JSON.

    python benchmarks/results.py                    # docs/results.json; then: python benchmarks/render.py

Each run is ``python train.py --pos P --stem S --seed K --out RUNS/P-S-seedK`` with nothing else: the budget
a user gets from ``python train.py --pos P``. The six main runs get every seed; every other registry scheme
gets the first seed, and the ``--top`` of those by validation top-1 get every seed too. Schemes with position
parameters pass ``--pos-lr-scale X`` too (folders ``P-S-lrX-seedK``): the default scale for the headline table,
and scale 1 (the rule off) for the ablation. Schemes without position parameters train identically at every
scale, so they are run once. A finished run (results.json) is reused, so an interrupted benchmark continues
where it stopped.
"""

from __future__ import annotations

import argparse
import sys

from common import MAIN_RUNS, ROOT, train_run, write_record  # noqa: E402  (benchmarks/ is on sys.path as a script)

from vitpos import POS_SCHEMES, create_model
from vitpos.config import Config

OTHERS = [f"{p}:patch" for p in POS_SCHEMES if f"{p}:patch" not in MAIN_RUNS]


def has_pos_params(pos: str) -> bool:
    return any(True for _ in create_model(pos, embed_dim=16, depth=1, num_heads=4).pos.parameters())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    default_scale = Config().optim.pos_lr_scale
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS, metavar="POS:STEM", help="runs with --seeds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--others", nargs="*", default=OTHERS, metavar="POS:STEM", help="runs with seed 0 first")
    p.add_argument("--top", type=int, default=3, help="others (by seed-0 validation top-1) trained with --seeds too")
    p.add_argument("--ablation", nargs="*", metavar="POS:STEM", help="rule-off runs (default: every scheme with "
                   "position parameters)")  # fmt: skip
    p.add_argument("--ablation-seeds", type=int, nargs="+", default=[0], help="seeds of the rule-off runs")
    tried = ((10, 0), (10, 1), (10, 2), (100, 0))  # (scale, seed)
    sweep = [f"{pos}:patch:{sc}:{k}" for pos in ("learned", "relbias") for sc, k in tried]
    p.add_argument("--sweep", nargs="*", default=sweep, metavar="POS:STEM:SCALE:SEED",
                   help="further runs at other scales: how the default scale was chosen")  # fmt: skip
    p.add_argument("--scale", type=float, default=default_scale, help="the position lr scale under test")
    p.add_argument("--out", default="runs/bench-shapes", help="folder of the training runs")
    p.add_argument("--json", default=str(ROOT / "docs" / "results.json"))
    p.add_argument("--retrain", action="store_true")
    args = p.parse_args(argv)
    out = ROOT / args.out
    for spec in args.runs + args.others:
        if spec.partition(":")[0] not in POS_SCHEMES:
            p.error(f"unknown scheme in '{spec}'")

    with_params = [s for s in dict.fromkeys(args.runs + args.others) if has_pos_params(s.split(":")[0])]
    runs: list[dict] = []

    def train(plan: list[tuple[str, int, float]]) -> None:
        for spec, seed, scale in plan:
            if not any((r["spec"], r["seed"], r["pos_lr_scale"]) == (spec, seed, scale) for r in runs):
                runs.append(train_one(spec, seed, scale))

    def train_one(spec: str, seed: int, scale: float) -> dict:
        pos, _, stem = spec.partition(":")
        flags = ["--pos", pos, "--stem", stem, "--seed", str(seed)]
        if spec in with_params:
            run_dir = out / f"{pos}-{stem}-lr{scale:g}-seed{seed}"
            flags += ["--pos-lr-scale", f"{scale:g}"]
        else:  # no position parameters: the same training at every scale
            run_dir = out / f"{pos}-{stem}-seed{seed}"
        res = train_run(run_dir, flags, args.retrain)
        rel = run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir
        return {"spec": spec, "pos": pos, "stem": stem, "seed": seed, "pos_lr_scale": scale,
                "pos_params": spec in with_params, "best_val_top1": res["best_val_top1"],
                "test_top1": res["test"]["test/top1"], "train_seconds": res["train_seconds"],
                "steps": res["global_step"], "run": str(rel)}  # fmt: skip

    train([(spec, seed, args.scale) for spec in args.runs for seed in args.seeds])
    train([(spec, args.seeds[0], args.scale) for spec in args.others])
    screened = [r for r in runs if r["spec"] in args.others]
    top = [r["spec"] for r in sorted(screened, key=lambda r: -r["best_val_top1"])[: args.top]]
    train([(spec, seed, args.scale) for spec in top for seed in args.seeds])
    ablation = with_params if args.ablation is None else [s for s in args.ablation if s in with_params]
    train([(spec, seed, 1.0) for spec in ablation for seed in args.ablation_seeds])
    for item in args.sweep:
        pos, stem, scale, seed = item.split(":")
        train([(f"{pos}:{stem}", int(seed), float(scale))])
    cfg = Config()
    budget = {"embed_dim": cfg.model.embed_dim, "depth": cfg.model.depth, "num_heads": cfg.model.num_heads,
              "patch_size": cfg.model.patch_size, "img_size": cfg.model.img_size, "epochs": cfg.optim.epochs,
              "train_size": cfg.data.train_size, "val_size": cfg.data.val_size, "test_size": cfg.data.test_size,
              "batch_size": cfg.data.batch_size, "lr": cfg.optim.lr, "default_pos_lr_scale": default_scale}  # fmt: skip
    write_record(args.json, "results.py", argv, budget=budget, top_others=top, runs=runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
