"""Train every position scheme on the embedded `shapes` set with the default budget, over seeds; write JSON.

    python -m benchmarks.results --jobs 2           # docs/results.json; then: python -m benchmarks.pages

Each run is ``python train.py --pos P --stem S --seed K`` with nothing else. The six main runs get every seed, every
other scheme the first seed, and the ``--top`` of those by validation top-1 every seed too (chosen once and kept in
the JSON, so a retrained seed 0 does not move the choice; ``--repick`` chooses again); so do the ``--more-seeds``
schemes, by default every one of ``--others``. These runs are the evidence the position rule and `relbias`'s start
were chosen from on validation (benchmarks/protocol.py, docs/protocol.md). Schemes with
position parameters also train with the rule off (``--pos-lr-scale 1``, no decay) and under the ``--sweep`` rules
(scale, decay, its target, ramp; a scheme option where named); those without train identically under every rule,
so once. A finished run is reused (its folder's results.json, or else its record in the JSON this study wrote
before at the same budget): an interrupted study continues.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from benchmarks.common import (
    MAIN_RUNS,
    ROOT,
    cores_per_job,
    earlier_record,
    has_pos_params,
    run_specs,
    study_budget,
    study_run,
    train_run,
    write_record,
)
from benchmarks.rules import pos_rule, pos_rule_of
from vitpos import POS_SCHEMES
from vitpos.config import Config

OTHERS = [f"{p}:patch" for p in POS_SCHEMES if f"{p}:patch" not in MAIN_RUNS]
DEFAULT = Config().optim
# The runs that chose the default rule, each POS:STEM:SCALE:SEED followed by any of :decay=W, :to=start|zero and
# :ramp=EPOCHS (what is not named: the default rule's).
BARE = ":decay=0:ramp=0"  # the rule before the decay and the ramp existed: the scale from the first step, alone
# `relbias`'s tables started from noise alone (Swin's init) until `locality=1` became its default: its runs under the
# rules measured before name `locality=0` (in a composition, `relbias.locality=0`).
SWIN_INIT = {"relbias": ":locality=0", "relbias+peg": ":relbias.locality=0"}


def swin(pos: str) -> str:
    return SWIN_INIT.get(pos, "")


# `learned` and `relbias` at scales 10 and 100, and the scale that suits `learned` alone on the composition with a
# learned table.
SWEEP = [f"{pos}:patch:{scale}:{seed}{BARE}{swin(pos)}" for pos in ("learned", "relbias")
         for scale, seed in ((10, 0), (10, 1), (10, 2), (100, 0))]  # fmt: skip
SWEEP += [f"rope2d+learned:patch:10:0{BARE}"]
# Scale 30 alone for every scheme with position parameters (seeds 0-2; the compositions with a learned table 0-4),
# and the rule off (scale 1) for those compositions, `peg` and `cpb` over seeds: at scale 30 alone every seed of the
# compositions fell below every rule-off seed, and `cpb`'s seed 0 below its rule-off seed.
WITH_PARAMS = ["learned", "relbias", "rope2d-mixed", "cpb", "peg", "liere", "rope2d+learned", "rope2d+peg",
               "relbias+peg", "rope2d-mixed+learned", "alibi2d+peg"]  # fmt: skip
COMPOSED = ("rope2d+learned", "rope2d-mixed+learned")
SEEDS = {pos: range(5 if pos in COMPOSED else 3) for pos in WITH_PARAMS}
SWEEP += [f"{pos}:patch:30:{seed}{BARE}{swin(pos)}" for pos in WITH_PARAMS for seed in SEEDS[pos]]
SWEEP += [f"{pos}:patch:1:{seed}:decay=0" for pos in COMPOSED for seed in (1, 2, 3, 4)]
SWEEP += [f"{pos}:patch:1:{seed}:decay=0" for pos in ("peg", "cpb") for seed in (1, 2)]
SWEEP += [f"{pos}:patch:1:0:decay=0{swin(pos)}" for pos in SWIN_INIT]  # the rule off with Swin's init
# Decay 0.3 towards zero (the first decay measured) at scale 30: learned and relbias over seeds, the composition,
# and peg, whose conv it erases.
ZEROED = [("learned", 0), ("learned", 1), ("learned", 2), ("relbias", 0), ("relbias", 1), ("relbias", 2),
          ("rope2d+learned", 0), ("rope2d+learned", 1), ("peg", 0)]  # fmt: skip
SWEEP += [f"{pos}:patch:30:{seed}:decay=0.3:to=zero:ramp=0{swin(pos)}" for pos, seed in ZEROED]
# A stronger decay towards the start (1), tried beside 0.3 and not taken, on the `relbias` seed that plateaus most
# easily.
SWEEP += ["relbias:patch:30:1:decay=1:to=start:ramp=0:locality=0"]
# Decay 0.3 towards the start without a ramp (the default before the ramp): every scheme with position parameters
# over seeds.
SWEEP += [f"{pos}:patch:30:{seed}:ramp=0{swin(pos)}" for pos in WITH_PARAMS for seed in SEEDS[pos]]
# The scale ramped in over 3 epochs: a lower early lr, so that RoPE, not the learned table beside it, carries position
# in `rope2d+learned` (5 seeds, as its rule-off runs have), and `learned` over seeds; against them, every `relbias`
# seed, whose plateau a lower early lr may not leave. Over 1 epoch on the seeds where the two pull apart. Seed 0 of
# every other scheme with position parameters.
SWEEP += [f"rope2d+learned:patch:30:{seed}:ramp=3" for seed in range(5)]
SWEEP += [f"{pos}:patch:30:{seed}:ramp=3{swin(pos)}" for pos in ("relbias", "learned") for seed in range(3)]
SWEEP += [f"{pos}:patch:30:1:ramp=1{swin(pos)}" for pos in ("relbias", "rope2d+learned")]
SWEEP += [f"{pos}:patch:30:0:ramp=3{swin(pos)}" for pos in WITH_PARAMS
          if pos not in ("learned", "relbias", "rope2d+learned")]  # fmt: skip
# Over 5 epochs (the default): `rope2d+learned` over seeds 3-4 too, as its rule-off runs; with Swin's init, the
# `relbias` seed that stayed on its plateau under the 3-epoch ramp, and `relbias+peg`.
SWEEP += [f"rope2d+learned:patch:30:{seed}:ramp=5" for seed in (3, 4)]
SWEEP += ["relbias:patch:30:1:ramp=5:locality=0", "relbias+peg:patch:30:0:ramp=5:relbias.locality=0"]
RULE_FIELDS = ("decay", "to", "ramp")


def parse_sweep(item: str) -> tuple[str, int, dict, dict]:
    """POS:STEM:SCALE:SEED[:decay=W][:to=T][:ramp=E][:KEY=VALUE ...] -> (POS:STEM, seed, rule, scheme options): the
    rule's unnamed fields are the default rule's; any other KEY is a scheme option (PART.KEY: a composition part's)."""
    pos, stem, scale, seed, *named = item.split(":")
    given = dict(part.split("=", 1) for part in named)
    decay = float(given.get("decay", DEFAULT.pos_weight_decay))
    ramp = float(given.get("ramp", DEFAULT.pos_lr_warmup_epochs))
    opts: dict = {}
    for key, value in given.items():
        if key not in RULE_FIELDS:
            *parts, leaf = key.split(".")
            at = opts
            for part in parts:
                at = at.setdefault(part, {})
            at[leaf] = yaml.safe_load(value)
    rule = pos_rule(float(scale), decay, given.get("to", DEFAULT.pos_decay_to), ramp)
    return f"{pos}:{stem}", int(seed), rule, opts


def recorded_runs(path: Path, budget: dict) -> list[dict]:
    """The runs of an earlier record of this study made at ``budget`` (the default rule aside: each run names its
    own), else none; older records name no position weight decay: it was 0."""
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    training = {k: v for k, v in budget.items() if not k.startswith("default_")}
    if earlier and {k: v for k, v in earlier.get("budget", {}).items() if not k.startswith("default_")} != training:
        print(f"not reusing {path}: it was made at another budget", flush=True)
        return []
    return [r | pos_rule_of(r) for r in earlier.get("runs", [])]  # older records name fewer fields of the rule


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="*", default=MAIN_RUNS, metavar="POS:STEM", help="runs with --seeds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--others", nargs="*", default=OTHERS, metavar="POS:STEM", help="runs with seed 0 first")
    p.add_argument("--top", type=int, default=3, help="others (by seed-0 validation top-1) trained with --seeds too")
    p.add_argument("--more-seeds", nargs="*", metavar="POS:STEM",
                   help="others trained with --seeds too (default: every one of --others)")  # fmt: skip
    p.add_argument("--ablation", nargs="*", metavar="POS:STEM",
                   help="rule-off runs, seed 0 (default: every scheme with position parameters)")  # fmt: skip
    p.add_argument("--sweep", nargs="*", default=SWEEP,
                   metavar="POS:STEM:SCALE:SEED[:decay=W][:to=T][:ramp=E][:KEY=VALUE]",
                   help="further runs under other position rules (--pos-lr-scale, --pos-weight-decay, --pos-decay-to, "
                        "--pos-lr-warmup-epochs; what is not named: the default's) or with a scheme option "
                        "(--pos-kwarg KEY=VALUE; PART.KEY=VALUE in a composition)")  # fmt: skip
    p.add_argument("--out", default="runs/bench-shapes", help="folder of the training runs")
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, each with cores / jobs threads")
    p.add_argument("--json", default=str(ROOT / "docs" / "results.json"))
    p.add_argument("--retrain", action="store_true")
    p.add_argument("--repick", action="store_true", help="choose the --top others again instead of the recorded ones")
    args = p.parse_args(argv)
    threads = cores_per_job(p, args.jobs)
    args.more_seeds = args.others if args.more_seeds is None else args.more_seeds
    run_specs(p, args.runs + args.others + args.more_seeds)
    cfg, out = Config(), ROOT / args.out
    o = cfg.optim
    default = pos_rule_of(vars(o))
    off = pos_rule(1.0)
    with_params = [s for s in dict.fromkeys(args.runs + args.others + args.more_seeds) if has_pos_params(s)]
    d = cfg.data
    budget = study_budget(cfg, train_size=d.train_size, val_size=d.val_size, test_size=d.test_size,
                          **{f"default_{k}": v for k, v in default.items()})  # fmt: skip
    recorded = {} if args.retrain else {r["run"]: r for r in recorded_runs(Path(args.json), budget)}
    runs: dict[tuple, dict] = {}  # in the order trained: the pages list them so
    if args.jobs > 1:  # each training inherits this (common.run passes os.environ on)
        os.environ["OMP_NUM_THREADS"] = str(threads)

    def train(spec: str, seed: int, rule: dict, opts: dict) -> dict:
        pos, _, stem = spec.partition(":")
        run_dir, flags = study_run(out, pos, stem, seed, rule, opts, has_pos_params(spec))
        key = {"spec": spec, "pos": pos, "stem": stem, "seed": seed, **rule, "pos_params": has_pos_params(spec),
               **({"pos_kwargs": opts} if opts else {})}  # fmt: skip
        rel = str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir)
        if not (run_dir / "results.json").is_file() and rel in recorded:
            print(f"reusing the recorded run {rel}", flush=True)
            return recorded[rel] | key
        return key | train_run(run_dir, flags, args.retrain)

    def train_all(jobs: list[tuple[str, int, dict, dict]]) -> None:
        """Train the (spec, seed, rule, scheme options) jobs not trained yet, --jobs at a time, into ``runs`` in the
        jobs' order."""
        todo = {(spec, seed, *rule.values(), json.dumps(opts, sort_keys=True)): (spec, seed, rule, opts)
                for spec, seed, rule, opts in jobs}  # fmt: skip
        todo = {k: job for k, job in todo.items() if k not in runs}
        with ThreadPoolExecutor(args.jobs) as pool:
            runs.update(zip(todo, pool.map(lambda job: train(*job), todo.values()), strict=True))

    # Two rounds: which others get every seed depends on the first round's seed-0 runs.
    train_all([(s, seed, default, {}) for s in args.runs for seed in args.seeds]
              + [(s, args.seeds[0], default, {}) for s in args.others])  # fmt: skip
    top = earlier_record(args.json).get("top_others", [])  # the choice made before, kept unless it no longer fits
    if args.repick or len(top) != args.top or not set(top) <= set(args.others):
        top = sorted(args.others, key=lambda s: -runs[(s, args.seeds[0], *default.values(), "{}")]["best_val_top1"])
        top = top[: args.top]
    ablation = with_params if args.ablation is None else [s for s in args.ablation if s in with_params]
    more = top + [s for s in args.more_seeds if s not in top]
    train_all([(s, seed, default, {}) for s in more for seed in args.seeds]
              + [(s, 0, off, {}) for s in ablation] + [parse_sweep(item) for item in args.sweep])  # fmt: skip
    write_record(args.json, "results.py", argv, budget=budget, main_runs=args.runs, top_others=top,
                 runs=list(runs.values()))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
