"""The position-scheme study on Fashion-MNIST (real data, offline): every scheme over seeds, then its transfer; JSON.

    apt-get install dataset-fashion-mnist           # the data, once (Debian's package; no download)
    python -m benchmarks.fashion_mnist --jobs 2     # docs/fashion_mnist.json; then: python -m benchmarks.pages

Each run is ``python train.py --config configs/fashion_mnist_study.yaml --pos P --stem S --seed K`` (``--runs`` with
every seed, ``--single`` with the first), its validation curve kept. One ``python -m vitpos.evaluate`` then sweeps
every last checkpoint from 20 to 56 px with every transfer method, and the ``rope2d`` runs measure YaRN's two
temperatures. Finished runs and sweeps are reused; a run whose folder is gone keeps its record (and sweep) from the
JSON this study wrote before, if that JSON was made at the same budget. The folders of schemes with position
parameters name the position rule (as benchmarks/results.py's do).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from benchmarks.common import (
    MAIN_RUNS,
    ROOT,
    cores_per_job,
    earlier_record,
    has_pos_params,
    run_name,
    run_specs,
    study_budget,
    study_here,
    train_run,
    transfer_study,
    write_record,
)
from benchmarks.rules import POS_RULE, pos_rule_of
from vitpos.config import Config

CONFIG = "configs/fashion_mnist_study.yaml"
NEWEST = ["alibi2d:patch", "lookhere:patch", "rope2d-norm:patch", "liere:patch"]  # with the first seed
RESOLUTIONS = ["20", "28", "40", "56"]
TEMPERATURE_GRIDS = ["40", "56"]


def val_curve(run_dir: Path) -> list[float]:
    """Validation top-1 after each epoch, from the run's CSV log."""
    with open(run_dir / "logs" / "metrics.csv") as fh:
        return [float(row["val/top1"]) for row in csv.DictReader(fh) if row.get("val/top1")]


def study_of(eval_limit: int) -> dict:
    """The budget this study's page states: the config's training budget and how many test images are swept."""
    cfg = Config.from_yaml(ROOT / CONFIG)
    o, d = cfg.optim, cfg.data
    rule = pos_rule_of(vars(o))
    return study_budget(cfg, config=CONFIG, train_limit=d.train_limit, holdout_size=d.holdout_size, **rule,
                        eval_limit=eval_limit)  # fmt: skip


def reusable(earlier: dict, budget: dict) -> dict[str, dict]:
    """The recorded runs of ``earlier`` that ``budget`` would train the same way, by run folder: all of them at the
    same budget; at one that differs only in the position rule, the schemes without position parameters."""
    if not earlier:
        return {}
    before = earlier["budget"] | pos_rule_of(earlier["budget"])  # older records name fewer fields of the rule
    same_rule = all(before[k] == budget[k] for k in POS_RULE)
    if {k: v for k, v in before.items() if k not in POS_RULE} != {k: v for k, v in budget.items() if k not in POS_RULE}:
        print("not reusing the recorded runs: they were made at another budget", flush=True)
        return {}
    if not same_rule:
        print("reusing only the recorded runs of schemes without position parameters: the rule changed", flush=True)
    return {r["run"]: r for r in earlier.get("runs", []) if same_rule or not has_pos_params(r["pos"])}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # The best other schemes on `shapes` (seed-0 validation top-1), as benchmarks/results.py chose them.
    others = earlier_record(ROOT / "docs" / "results.json").get("top_others", [])
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS + others, metavar="POS:STEM")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--single", nargs="*", default=NEWEST, metavar="POS:STEM", help="runs with the first seed only")
    p.add_argument("--resolutions", nargs="+", default=RESOLUTIONS)
    p.add_argument("--eval-limit", type=int, default=300, help="sweep the first N test images (0: all)")
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, each with cores / jobs threads")
    p.add_argument("--data-dir", help="where the idx files are (default: the Debian package's folder)")
    p.add_argument("--out", default="runs/bench-fmnist")
    p.add_argument("--json", default=str(ROOT / "docs" / "fashion_mnist.json"))
    args = p.parse_args(argv)
    threads = cores_per_job(p, args.jobs)
    run_specs(p, args.runs + args.single)
    out = ROOT / args.out
    os.environ["OMP_NUM_THREADS"] = str(threads)  # inherited by each training (common.run passes os.environ on)

    budget = study_of(args.eval_limit)
    earlier = earlier_record(args.json)
    recorded = reusable(earlier, budget)

    def train(job: tuple[str, int]) -> dict:
        (pos, _, stem), seed = job[0].partition(":"), job[1]
        # A scheme with position parameters names its rule, so that under another rule it trains anew beside the
        # runs of the old one rather than reusing them (older records name none: theirs is in the JSON's budget).
        rule = {k: budget[k] for k in POS_RULE}
        run_dir = out / (run_name(pos, stem, seed, rule) if has_pos_params(pos) else f"{pos}-{stem}-seed{seed}")
        rel = str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir)
        if not (run_dir / "results.json").is_file() and rel in recorded:
            print(f"reusing the recorded run {rel}", flush=True)
            return recorded[rel]
        flags = ["--config", CONFIG, "--pos", pos, "--stem", stem, "--seed", str(seed)]
        res = train_run(run_dir, flags + (["--data-dir", args.data_dir] if args.data_dir else []))
        return {"pos": pos, "stem": stem, "seed": seed, **res, "val_curve": val_curve(run_dir)}

    with ThreadPoolExecutor(args.jobs) as pool:
        jobs = [(spec, seed) for seed in args.seeds for spec in args.runs]
        jobs += [(s, args.seeds[0]) for s in args.single if s not in args.runs]
        runs = list(pool.map(train, jobs))
    os.environ["OMP_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))  # one sweep, every core
    sweep = partial(transfer_study, resolutions=args.resolutions, limit=args.eval_limit, sweep_dir=out / "resolution",
                    temperature_grids=TEMPERATURE_GRIDS, extra=("--resize", "full"), earlier=earlier)  # fmt: skip
    study = study_here(runs, earlier, sweep)
    write_record(args.json, "fashion_mnist.py", argv, budget=budget, runs=runs, **study)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
