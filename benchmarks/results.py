"""The rule study: train every position scheme on the embedded `shapes` set with the default budget; write JSON.

    python -m benchmarks.results --jobs 2           # docs/rules.json; then: python -m benchmarks.protocol

Each run is ``python train.py --pos P --stem S --seed K`` and the position rule's flags. These runs are the
evidence that benchmarks/protocol.py chooses on validation from (docs/protocol.md): the position rule, `relbias`'s
start and the other schemes given every seed. By default every scheme trains seed 0 under the default rule; the
schemes with position parameters whose numbers the pages report (``RULE_SCHEMES``) also train with the rule off
(``--ablation``) and with each of its parts taken away in turn (``--sweep``): without the ramp, without the decay;
and `relbias` at both starts over two seeds. Schemes without position parameters train identically under every rule,
so once. ``--runs`` get every one of ``--seeds``; the ``--top`` others by seed-0 validation too (chosen once and kept
in the JSON; ``--repick`` chooses again), and so do the ``--more-seeds`` schemes. A finished run is reused (its
folder's results.json, or else its record in the JSON this study wrote before at the same budget): an interrupted
study continues.
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
# The schemes with position parameters the pages report: the two main ones, the three others chosen to be given every
# seed, and `cpb`, an MLP where the others hold tables, convolutions and rotation frequencies.
RULE_SCHEMES = ["learned", "relbias", "rope2d-mixed", "rope2d+peg", "relbias+peg", "cpb"]
# Each part of the default rule taken away in turn (POS:STEM:SCALE:SEED[:decay=W][:to=T][:ramp=E][:KEY=VALUE]; what
# is not named: the default rule's), and `relbias`'s start: its tables from noise alone (Swin's init, `locality=0`)
# against its default over two seeds.
SWEEP = [f"{pos}:patch:30:0:ramp=0" for pos in RULE_SCHEMES]
SWEEP += ["relbias:patch:30:0:locality=0", "relbias:patch:30:1", "relbias:patch:30:1:locality=0"]
SWEEP += [f"{pos}:patch:30:0:decay=0" for pos in RULE_SCHEMES]
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
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--others", nargs="*", default=OTHERS, metavar="POS:STEM", help="runs with seed 0 first")
    p.add_argument("--top", type=int, default=0, help="others (by seed-0 validation top-1) trained with --seeds too")
    p.add_argument("--more-seeds", nargs="*", default=[], metavar="POS:STEM", help="others trained with --seeds too")
    p.add_argument("--ablation", nargs="*", default=[f"{pos}:patch" for pos in RULE_SCHEMES], metavar="POS:STEM",
                   help="rule-off runs, seed 0 (of those with position parameters)")  # fmt: skip
    p.add_argument("--sweep", nargs="*", default=SWEEP,
                   metavar="POS:STEM:SCALE:SEED[:decay=W][:to=T][:ramp=E][:KEY=VALUE]",
                   help="further runs under other position rules (--pos-lr-scale, --pos-weight-decay, --pos-decay-to, "
                        "--pos-lr-warmup-epochs; what is not named: the default's) or with a scheme option "
                        "(--pos-kwarg KEY=VALUE; PART.KEY=VALUE in a composition)")  # fmt: skip
    p.add_argument("--out", default="runs/rules", help="folder of the training runs")
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, each with cores / jobs threads")
    p.add_argument("--json", default=str(ROOT / "docs" / "rules.json"))
    p.add_argument("--retrain", action="store_true")
    p.add_argument("--repick", action="store_true", help="choose the --top others again instead of the recorded ones")
    args = p.parse_args(argv)
    threads = cores_per_job(p, args.jobs)
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
    ablation = [s for s in args.ablation if s in with_params]
    more = top + [s for s in args.more_seeds if s not in top]
    train_all([(s, seed, default, {}) for s in more for seed in args.seeds]
              + [(s, 0, off, {}) for s in ablation] + [parse_sweep(item) for item in args.sweep])  # fmt: skip
    write_record(args.json, "results.py", argv, budget=budget, main_runs=args.runs, top_others=top,
                 runs=list(runs.values()))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
