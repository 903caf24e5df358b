"""Train every position scheme on the embedded `shapes` set with the default budget, over seeds; write JSON.

    python benchmarks/results.py                    # docs/results.json; then: python docs/render.py

Each run is ``python train.py --pos P --stem S --seed K`` with nothing else. The six main runs get every seed, every
other scheme the first seed, and the ``--top`` of those by validation top-1 every seed too (chosen once and kept in
the JSON, so a retrained seed 0 does not move the choice; ``--repick`` chooses again); so do the ``--more-seeds``
schemes, by default every one of ``--others``: docs/resolution.md's fine-tuning table and its published claims
compare means over seeds. The ``--top`` schemes are the ones the pages set beside the main runs. Schemes with
position parameters also train with the rule off (``--pos-lr-scale 1``) and at the ``--sweep`` scales and position
weight decays; those without train identically at every scale, so once. A finished run is reused (its folder's
results.json, or else its record in the JSON this study wrote before at the same budget): an interrupted study
continues.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import MAIN_RUNS, ROOT, earlier_record, run_specs, study_budget, train_run, write_record  # noqa: E402

from vitpos import POS_SCHEMES, create_model
from vitpos.config import Config

OTHERS = [f"{p}:patch" for p in POS_SCHEMES if f"{p}:patch" not in MAIN_RUNS]
TRIED = ((10, 0), (10, 1), (10, 2), (100, 0))  # (scale, seed) of the runs that chose the default scale
SWEEP = [f"{pos}:patch:{scale}:{seed}" for pos in ("learned", "relbias") for scale, seed in TRIED]
SCALE = Config().optim.pos_lr_scale
SWEEP += ["rope2d+learned:patch:10:0"]  # the scale that suits `learned` alone, on that composition
# The compositions with a learned table (each of seeds 0-2 lower at the default scale than with the rule off, the
# intervals overlapping): seeds 1-4 at both, so that five seeds a side say whether the default makes them worse.
SWEEP += [f"{pos}:patch:{scale:g}:{seed}" for pos in ("rope2d+learned", "rope2d-mixed+learned")
          for scale in (SCALE, 1) for seed in (1, 2, 3, 4)]  # fmt: skip
SWEEP += [f"peg:patch:1:{seed}" for seed in (1, 2)]  # the rule off over seeds for peg, lower at the default on seed 0
# Position weight decay 0.3 at the default scale: learned and relbias over seeds, the composition whose learned table
# the default scale makes worse, and peg, whose conv the decay pulls towards zero.
DECAYED = [("learned", 0), ("learned", 1), ("learned", 2), ("relbias", 0), ("relbias", 1), ("relbias", 2),
           ("rope2d+learned", 0), ("rope2d+learned", 1), ("peg", 0)]  # fmt: skip
SWEEP += [f"{pos}:patch:{SCALE:g}:{seed}:0.3" for pos, seed in DECAYED]


def has_pos_params(pos: str) -> bool:
    return any(True for _ in create_model(pos, embed_dim=16, depth=1, num_heads=4).pos.parameters())


def recorded_runs(path: Path, budget: dict) -> list[dict]:
    """The runs of an earlier record of this study made at ``budget`` (the default rule aside: each run names its
    own), else none; older records name no position weight decay: it was 0."""
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    training = {k: v for k, v in budget.items() if not k.startswith("default_")}
    if earlier and {k: v for k, v in earlier.get("budget", {}).items() if not k.startswith("default_")} != training:
        print(f"not reusing {path}: it was made at another budget", flush=True)
        return []
    return [{"pos_weight_decay": 0.0} | r for r in earlier.get("runs", [])]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS, metavar="POS:STEM", help="runs with --seeds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--others", nargs="*", default=OTHERS, metavar="POS:STEM", help="runs with seed 0 first")
    p.add_argument("--top", type=int, default=3, help="others (by seed-0 validation top-1) trained with --seeds too")
    p.add_argument("--more-seeds", nargs="*", metavar="POS:STEM",
                   help="others trained with --seeds too (default: every one of --others)")  # fmt: skip
    p.add_argument("--ablation", nargs="*", metavar="POS:STEM",
                   help="rule-off runs, seed 0 (default: every scheme with position parameters)")  # fmt: skip
    p.add_argument("--sweep", nargs="*", default=SWEEP, metavar="POS:STEM:SCALE:SEED[:DECAY]",
                   help="further runs at other scales and position weight decays (--pos-weight-decay)")  # fmt: skip
    p.add_argument("--out", default="runs/bench-shapes", help="folder of the training runs")
    p.add_argument("--json", default=str(ROOT / "docs" / "results.json"))
    p.add_argument("--retrain", action="store_true")
    p.add_argument("--repick", action="store_true", help="choose the --top others again instead of the recorded ones")
    args = p.parse_args(argv)
    args.more_seeds = args.others if args.more_seeds is None else args.more_seeds
    run_specs(p, args.runs + args.others + args.more_seeds)
    cfg, out = Config(), ROOT / args.out
    scale, decay = cfg.optim.pos_lr_scale, cfg.optim.pos_weight_decay
    with_params = [
        s for s in dict.fromkeys(args.runs + args.others + args.more_seeds) if has_pos_params(s.split(":")[0])
    ]
    d = cfg.data
    budget = study_budget(cfg, train_size=d.train_size, val_size=d.val_size, test_size=d.test_size,
                          default_pos_lr_scale=scale, default_pos_weight_decay=decay)  # fmt: skip
    recorded = {} if args.retrain else {r["run"]: r for r in recorded_runs(Path(args.json), budget)}
    runs: dict[tuple[str, int, float, float], dict] = {}  # in the order trained: the pages list them so

    def train(spec: str, seed: int, lr_scale: float, wd: float = decay) -> None:
        if (spec, seed, lr_scale, wd) in runs:
            return
        pos, _, stem = spec.partition(":")
        flags = ["--pos", pos, "--stem", stem, "--seed", str(seed)]
        if spec in with_params:
            run_dir = out / f"{pos}-{stem}-lr{lr_scale:g}{f'-wd{wd:g}' if wd else ''}-seed{seed}"
            flags += ["--pos-lr-scale", f"{lr_scale:g}", "--pos-weight-decay", f"{wd:g}"]
        else:  # no position parameters: the same training at every scale
            run_dir = out / f"{pos}-{stem}-seed{seed}"
        key = {"spec": spec, "pos": pos, "stem": stem, "seed": seed, "pos_lr_scale": lr_scale,
               "pos_weight_decay": wd, "pos_params": spec in with_params}  # fmt: skip
        rel = str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir)
        if not (run_dir / "results.json").is_file() and rel in recorded:
            print(f"reusing the recorded run {rel}", flush=True)
            runs[spec, seed, lr_scale, wd] = recorded[rel] | key
        else:
            runs[spec, seed, lr_scale, wd] = key | train_run(run_dir, flags, args.retrain)

    for spec in args.runs:
        for seed in args.seeds:
            train(spec, seed, scale)
    for spec in args.others:
        train(spec, args.seeds[0], scale)
    top = earlier_record(args.json).get("top_others", [])  # the choice made before, kept unless it no longer fits
    if args.repick or len(top) != args.top or not set(top) <= set(args.others):
        top = sorted(args.others, key=lambda s: -runs[s, args.seeds[0], scale, decay]["best_val_top1"])[: args.top]
    for spec in top + [s for s in args.more_seeds if s not in top]:
        for seed in args.seeds:
            train(spec, seed, scale)
    for spec in with_params if args.ablation is None else [s for s in args.ablation if s in with_params]:
        train(spec, 0, 1.0, 0.0)
    for item in args.sweep:
        pos, stem, sweep_scale, seed, *wd = item.split(":")
        train(f"{pos}:{stem}", int(seed), float(sweep_scale), float(wd[0]) if wd else decay)
    write_record(args.json, "results.py", argv, budget=budget, main_runs=args.runs, top_others=top,
                 runs=list(runs.values()))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
