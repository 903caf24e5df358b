"""How the position parameters move: `learned` alone and beside RoPE, under the default rule and the rule off; JSON.

    python -m benchmarks.pos_dynamics              # docs/pos_dynamics.json; then: python -m benchmarks.pages

Each run is ``python train.py --pos P --seed 0`` at the default budget, with the default position rule or with it off
(``--pos-lr-scale 1 --pos-weight-decay 0``). Every run logs ``pos/rms`` (the rms of the position parameters) and
``pos/grad_rms`` (of their gradients) every 10 steps; this study keeps those curves, the run's top-1 and its
provenance. Finished runs are reused: by default those of the rule study (benchmarks/results.py, runs/rules), which
trains three of the four.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import (
    ROOT,
    cores_per_job,
    run_name,
    run_specs,
    study_budget,
    train_run,
    write_record,
)
from benchmarks.rules import pos_rule, pos_rule_of
from vitpos.config import Config

RUNS = ["learned:patch", "rope2d+learned:patch"]
RULE_OFF = ["--pos-lr-scale", "1", "--pos-weight-decay", "0"]


def pos_curves(run_dir: Path) -> dict[str, list[float]]:
    """The logged steps and, at each, the position parameters' rms and gradient rms, from the run's CSV log."""
    with open(run_dir / "logs" / "metrics.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("pos/rms")]
    return {"step": [int(r["step"]) for r in rows], "rms": [float(r["pos/rms"]) for r in rows],
            "grad_rms": [float(r["pos/grad_rms"]) for r in rows]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", default=RUNS, metavar="POS:STEM", help="schemes with position parameters")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, each with cores / jobs threads")
    p.add_argument(
        "--out", default="runs/rules", help="folder of the training runs (the rule study's: its runs are reused)"
    )
    p.add_argument("--json", default=str(ROOT / "docs" / "pos_dynamics.json"))
    args = p.parse_args(argv)
    threads = cores_per_job(p, args.jobs)
    specs = run_specs(p, args.runs)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # inherited by each training (common.run passes os.environ on)
    cfg = Config()
    o = cfg.optim
    default = pos_rule_of(vars(o))
    rules = {"default": ([], default), "off": (RULE_OFF, pos_rule(1.0))}

    def train(job: tuple[tuple[str, str], str]) -> dict:
        (pos, stem), rule = job
        flags, fields = rules[rule]
        run_dir = ROOT / args.out / run_name(pos, stem, args.seed, fields)  # by the rule's values: a new default
        # trains anew beside the old one's runs
        res = train_run(run_dir, ["--pos", pos, "--stem", stem, "--seed", str(args.seed), *flags])
        curves = pos_curves(run_dir)
        if not curves["step"]:
            p.error(f"{run_dir}/logs/metrics.csv has no pos/rms: {pos} has no position parameters, or the run predates "
                    "that log; delete the folder to train it again")  # fmt: skip
        return {"pos": pos, "stem": stem, "seed": args.seed, "rule": rule, **fields, **res, **curves}

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(train, [(spec, rule) for rule in rules for spec in specs]))
    write_record(args.json, "pos_dynamics.py", argv, budget=study_budget(cfg, **default), runs=runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
