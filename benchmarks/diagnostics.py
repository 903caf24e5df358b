"""Diagnostics of one checkpoint per scheme: pictures in docs/diagnostics/<run>/, the summary in JSON.

    python -m benchmarks.results         # the runs this reads (docs/rules.json, its --json there)
    python -m benchmarks.diagnostics     # docs/diagnostics.json and docs/diagnostics/<run>/
    python -m benchmarks.pages           # docs/diagnostics.md

``vitpos.diagnose.diagnose`` on ``last.ckpt`` of every seed-0 run of docs/rules.json at the default position
rule (its lr scale, decay and ramp) and default scheme options: patch-shuffle top-1, attention distance per block,
pictures. Each record names the run's provenance (machine, device, commit, torch, checkpoint hash). A run whose
checkpoint is gone keeps its record (and its pictures) from the JSON this study wrote before.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common import ROOT, at_default_rule, earlier_record, write_record
from vitpos.diagnose import diagnose

PROVENANCE = ("hardware", "device", "commit", "torch", "ckpt_sha256")  # the run's, from the record it is read from


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(ROOT / "docs" / "rules.json"), help="the runs (benchmarks/results.py)")
    p.add_argument("--docs", default=str(ROOT / "docs"), help="pictures go to DOCS/diagnostics/<run>/")
    p.add_argument("--num-images", type=int, default=256)
    a = p.parse_args(argv)
    results = json.loads(Path(a.results).read_text())
    records = []
    earlier = {rec["run"]: rec for rec in earlier_record(Path(a.docs, "diagnostics.json")).get("runs", [])}
    for r in results["runs"]:
        if r["seed"] == 0 and at_default_rule(r, results["budget"]):
            run = ROOT / r["run"]
            if not (run / "checkpoints" / "last.ckpt").is_file():
                if run.name not in earlier:
                    p.error(f"{run}/checkpoints/last.ckpt is gone and {a.docs}/diagnostics.json has no record of it")
                print(f"reusing the recorded diagnostics of {run.name}: its checkpoint is gone", flush=True)
                records.append(earlier[run.name])
                continue
            s = diagnose(run / "checkpoints" / "last.ckpt", Path(a.docs, "diagnostics", run.name),
                         num_images=a.num_images, overwrite=True)  # fmt: skip
            records.append({"run": run.name, "patch_shuffle": s["patch_shuffle"], "pictures": s["pictures"],
                            "attention_distance": s["mean_attention_distance_per_block"],
                            **{k: r[k] for k in PROVENANCE if k in r}})  # fmt: skip
    write_record(Path(a.docs, "diagnostics.json"), "diagnostics.py", argv, num_images=a.num_images, runs=records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
