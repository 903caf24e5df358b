"""The choices the study's defaults rest on, made on validation top-1 from recorded runs, and written down.

    python -m benchmarks.protocol          # docs/protocol.json (then python -m benchmarks.pages)

* **The position rule** (the learning-rate scale of position parameters, its ramp, the decay and its target): among
  the rules in the record of rule runs (``--runs``, docs/rules.json), each pair of rules is compared on the
  (scheme, seed) runs they share, every scheme at its default options: the paired mean difference of best validation
  top-1, with its paired t interval (Holm over the chosen rule's comparisons). The rule chosen is the one above every
  other rule it shares at least ``--min-pairs`` runs with.
* **relbias's start** (``locality``): under the chosen rule, the start with the higher mean validation top-1 over the
  seeds both starts have.
* **The other schemes that get every seed**: the ``--top`` schemes outside the main runs with the highest seed-0
  validation top-1 under the chosen rule.

Only runs that name their machine and commit choose, and they must name one machine kind and one commit: a table
comes from one kind of machine and one code version. The evidence says how many runs of the record were left out.

No test number is read. The choice of each scheme's transfer method is the study's (benchmarks.study), on the
validation split at the new sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.common import MAIN_RUNS, ROOT, write_record
from benchmarks.rules import pos_rule_of
from benchmarks.stats import holm, paired

RULE_KEYS = ("pos_lr_scale", "pos_weight_decay", "pos_decay_to", "pos_lr_warmup_epochs")


def rule_of(run: dict) -> tuple:
    return tuple(pos_rule_of(run)[k] for k in RULE_KEYS)


def rule_name(rule: tuple) -> dict:
    return dict(zip(RULE_KEYS, rule, strict=True))


def val_by_rule(runs: list[dict]) -> dict[tuple, dict[tuple, float]]:
    """rule -> (scheme, seed) -> best validation top-1, for runs with position parameters at default options."""
    out: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for r in runs:
        if r.get("pos_params") and not r.get("pos_kwargs"):
            out[rule_of(r)][(r["spec"], r["seed"])] = r["best_val_top1"]
    return out


def choose_rule(runs: list[dict], min_pairs: int = 5) -> dict:
    """The rule above every other rule it shares ``min_pairs`` or more runs with (paired mean validation top-1), with
    every comparison; ``chosen`` is None when no rule beats all the others it is compared with."""
    by = val_by_rule(runs)
    table = []
    for a in by:
        for b in by:
            shared = sorted(set(by[a]) & set(by[b]))
            if a != b and len(shared) >= max(min_pairs, 2):  # an interval needs two pairs
                d = [by[a][k] - by[b][k] for k in shared]
                table.append({"rule": rule_name(a), "other": rule_name(b), "pairs": len(shared),
                              "mean_diff": sum(d) / len(d), "wins": sum(v > 0 for v in d),
                              "losses": sum(v < 0 for v in d),
                              "paired": paired([by[a][k] for k in shared], [by[b][k] for k in shared])})  # fmt: skip
    winners = [a for a in by if any(t["rule"] == rule_name(a) for t in table)
               and all(t["mean_diff"] > 0 for t in table if t["rule"] == rule_name(a))]  # fmt: skip
    chosen = rule_name(winners[0]) if len(winners) == 1 else None
    # The interval of each comparison, and for the chosen rule's (the family the page reports) Holm over them.
    family = [t for t in table if t["rule"] == chosen]
    for t, d in zip(family, holm([t["paired"] for t in family]), strict=True):
        t["holm"] = {"low": d.low, "high": d.high, "p": d.p_holm, "verdict": d.verdict}
    for t in table:
        d = t.pop("paired")
        t |= {"low": d.low, "high": d.high, "p": d.p}
    # Every run that voted, so that a page can show where a mean comes from scheme by scheme.
    votes = [{"rule": rule_name(a), "spec": spec, "seed": seed, "best_val_top1": v}
             for a in by for (spec, seed), v in sorted(by[a].items())]  # fmt: skip
    return {"chosen": chosen, "comparisons": table, "runs": votes}


def choose_start(runs: list[dict], rule: dict, scheme: str = "relbias:patch") -> dict:
    """Under ``rule``: mean validation top-1 per ``locality`` over the seeds every start has; the higher is chosen."""
    by: dict[object, dict[int, float]] = defaultdict(dict)
    for r in runs:
        if r["spec"] == scheme and pos_rule_of(r) == rule:
            by[(r.get("pos_kwargs") or {}).get("locality", 1)][r["seed"]] = r["best_val_top1"]
    seeds = sorted(set.intersection(*(set(v) for v in by.values()))) if by else []
    means = {str(k): sum(v[s] for s in seeds) / len(seeds) for k, v in by.items()} if seeds else {}
    chosen = max(means, key=means.get) if len(means) > 1 else None
    out = {"scheme": scheme, "option": "locality", "seeds": seeds, "val_mean": means,
           "chosen": None if chosen is None else int(chosen)}  # fmt: skip
    if chosen is not None and len(means) == 2 and len(seeds) >= 2:  # the chosen start minus the other, paired by seed
        other = next(k for k in by if str(k) != chosen)
        d = paired([by[int(chosen)][s] for s in seeds], [by[other][s] for s in seeds])
        out["difference"] = {"diff": float(d.diff), "low": float(d.low), "high": float(d.high), "p": float(d.p)}
    return out


def choose_top(runs: list[dict], rule: dict, k: int, main: list[str]) -> dict:
    """The ``k`` schemes outside ``main`` with the highest seed-0 validation top-1 under ``rule`` (default options)."""
    seed0 = {r["spec"]: r["best_val_top1"] for r in runs
             if r["seed"] == 0 and r["spec"] not in main and not r.get("pos_kwargs")
             and (not r.get("pos_params") or pos_rule_of(r) == rule)}  # fmt: skip
    ranked = sorted(seed0, key=lambda s: (-seed0[s], s))
    return {"chosen": ranked[:k], "seed0_val": {s: seed0[s] for s in ranked}}


def recorded(runs: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """The runs that name every one of ``keys`` (their machine, their commit)."""
    return [r for r in runs if all(r.get(k) for k in keys)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=str(ROOT / "docs" / "rules.json"), help="the record of rule runs")
    p.add_argument("--min-pairs", type=int, default=5)
    p.add_argument("--top", type=int, default=3)
    p.add_argument("--json", default=str(ROOT / "docs" / "protocol.json"))
    args = p.parse_args(argv)
    try:
        record = json.loads(Path(args.runs).read_text())
    except (OSError, ValueError) as e:
        p.error(f"cannot read the record of rule runs {args.runs}: {e}")
    runs = recorded(record["runs"], ("hardware", "commit"))
    path = Path(args.runs)
    evidence = {"file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else args.runs,
                "command": record.get("command"), "runs": len(runs), "left_out": len(record["runs"]) - len(runs),
                "hardware": sorted({r["hardware"] for r in runs}),
                "commit": sorted({r["commit"] for r in runs})}  # fmt: skip
    if len(evidence["hardware"]) != 1 or len(evidence["commit"]) != 1:
        p.error(f"the rule runs that name their machine and commit name {len(evidence['hardware'])} machine kinds and "
                f"{len(evidence['commit'])} commits; a table comes from one of each")  # fmt: skip
    rule = choose_rule(runs, args.min_pairs)
    if rule["chosen"] is None:
        p.error("no rule is above every other it shares runs with: nothing to choose; look at the comparisons")
    write_record(args.json, "protocol.py", argv, split="val", evidence=evidence, rule=rule,
                 start=choose_start(runs, rule["chosen"]), top_others=choose_top(runs, rule["chosen"], args.top,
                                                                                  MAIN_RUNS))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
