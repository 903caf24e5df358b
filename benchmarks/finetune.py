"""Swin v2's Table 1 protocol on `shapes`: each 32 px run tested directly at larger sizes, and after a short
fine-tune there (``train.py --init-from``); JSON.

    python -m benchmarks.results      # the 32 px runs (docs/results.json)
    python -m benchmarks.finetune     # docs/finetune.json; then: python -m benchmarks.pages (docs/resolution.md)

For every run of docs/results.json at the default rule with a seed in ``--seeds``: one ``python -m vitpos.evaluate``
tests the last checkpoints at each ``--sizes`` with every transfer method on the whole test split; then
``python train.py --init-from RUN/checkpoints/last.ckpt --img-size R`` fine-tunes (``--ft-*``, default one epoch) at
each size, and at the training size too: the control, the same training without a new grid (on ``--accelerator``; each
fine-tuning record keeps the hardware its run names in results.json). Finished runs are reused; a run
whose checkpoint is gone, or whose scheme ``--runs`` leaves out, keeps its records from the JSON this study wrote
before, and so do a scheme's runs at an earlier default rule until its runs at the current one are fine-tuned. The
fine-tuning flags are written beside the runs (``--out``/protocol.json): another protocol needs its own ``--out``, and
keeps no fine-tuning record made with the old one. ``--train-missing`` first trains the runs whose checkpoints are
gone and that have no fine-tuning record yet again, with the flags and seeds benchmarks/results.py gave them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common import (
    ROOT,
    at_default_rule,
    earlier_record,
    has_pos_params,
    last_ckpt,
    run_specs,
    study_here,
    study_run,
    train_run,
    transfer_study,
    write_record,
)
from benchmarks.rules import pos_rule_of


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(ROOT / "docs" / "results.json"), help="the runs (benchmarks/results.py)")
    p.add_argument("--sizes", type=int, nargs="+", default=[48, 64], help="sizes to test and fine-tune at (px)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--runs", nargs="+", metavar="POS:STEM", help="only these schemes (default: every one recorded)")
    p.add_argument("--out", default="runs/bench-shapes/finetune", help="folder of the fine-tuning runs")
    p.add_argument("--json", default=str(ROOT / "docs" / "finetune.json"))
    p.add_argument("--accelerator", default="cpu", help="where the fine-tuning runs train (train.py --accelerator)")
    p.add_argument("--train-missing", action="store_true",
                   help="first train again the runs whose checkpoints are gone and that have no fine-tuning "
                        "record, with the flags and seed results.py gave them (on --accelerator)")  # fmt: skip
    p.add_argument("--ft-epochs", type=int, default=1, help="epochs of each fine-tuning run")
    p.add_argument("--ft-lr", type=float, default=2.5e-4, help="its peak lr (default: a quarter of the 32 px runs')")
    p.add_argument("--ft-warmup-epochs", type=float, default=0.1, help="its warmup")
    args = p.parse_args(argv)
    protocol = ["--epochs", str(args.ft_epochs), "--lr", str(args.ft_lr), "--warmup-epochs", str(args.ft_warmup_epochs)]
    picked = set(run_specs(p, args.runs or []))
    results = json.loads(Path(args.results).read_text())
    b, out = results["budget"], ROOT / args.out
    runs = [r for r in results["runs"] if at_default_rule(r, b) and r["seed"] in args.seeds]
    current = {r["run"] for r in runs}  # the runs the page holds, --runs aside
    earlier = earlier_record(args.json)
    # Fine-tuning runs are reused by folder name, so a folder holds one protocol; an older folder without its
    # manifest is taken to hold the protocol of the JSON made from it.
    manifest = out / "protocol.json"
    before = json.loads(manifest.read_text()) if manifest.is_file() else earlier.get("finetune", protocol)
    if before != protocol and any(out.glob("*-ft*/results.json")):
        p.error(f"{args.out} holds fine-tuning runs made with {' '.join(before)}: pass another --out for this protocol")
    out.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(protocol))
    left_out = {str(last_ckpt(r)) for r in runs if picked and (r["pos"], r["stem"]) not in picked}
    runs = [r for r in runs if str(last_ckpt(r)) not in left_out]
    # runs left out by --runs, or whose checkpoints are gone, keep theirs (earlier defaults: below)
    same = earlier.get("finetune", protocol) == protocol  # the direct sweep does not depend on the protocol
    finetuned = {(f["run"], f["img_size"]): f for f in earlier.get("finetuned", []) if f["run"] in current and same}
    recorded = {run for run, _ in finetuned}
    for r in runs if args.train_missing else []:
        # the same training; on other hardware its numbers may differ from the record
        if not last_ckpt(r).is_file() and r["run"] not in recorded:
            rule, opts = pos_rule_of(r), r.get("pos_kwargs") or {}
            _, flags = study_run(ROOT, r["pos"], r["stem"], r["seed"], rule, opts, has_pos_params(r["pos"]))
            flags += ["--accelerator", args.accelerator] if args.accelerator != "cpu" else []
            res = train_run(ROOT / r["run"], flags, retrain=True)
            print(f"trained {r['run']} again: test top-1 {res['test_top1']:.4f} (recorded: {r['test_top1']:.4f})")

    def direct(here: list[dict]) -> dict:
        return transfer_study(here, [str(s) for s in args.sizes], 0, out / "direct", [], earlier=earlier)

    study = study_here(runs, earlier, direct)
    study["records"] += [rec for rec in earlier.get("records", []) if rec["checkpoint"] in left_out]
    for r in runs:
        if not last_ckpt(r).is_file():
            continue  # its fine-tuned records, if any, stay as recorded
        for size in [b["img_size"], *args.sizes]:
            flags = ["--init-from", str(last_ckpt(r)), "--img-size", str(size), "--seed", str(r["seed"]), *protocol]
            flags += ["--accelerator", args.accelerator] if args.accelerator != "cpu" else []
            res = train_run(out / f"{Path(r['run']).name}-ft{size}", flags)
            finetuned[r["run"], size] = {"run": r["run"], "pos": r["pos"], "stem": r["stem"], "seed": r["seed"],
                                         "img_size": size, "test_top1": res["test_top1"],
                                         "hardware": res.get("hardware")}  # fmt: skip
    # A scheme's runs at an earlier default keep their records until its runs at this one are fine-tuned (their
    # checkpoints may be on another machine): the page shows them apart, under the rule they trained with.
    fresh = {(f["pos"], f["stem"]) for f in finetuned.values()}
    older = [f for f in earlier.get("finetuned", []) if f["run"] not in current and same
             and (f["pos"], f["stem"]) not in fresh]  # fmt: skip
    ckpts = {str(last_ckpt(f)) for f in older}
    study["records"] += [rec for rec in earlier.get("records", []) if rec["checkpoint"] in ckpts]
    write_record(args.json, "finetune.py", argv, train_resolution=b["img_size"], sizes=args.sizes, finetune=protocol,
                 records=study["records"], finetuned=[*finetuned.values(), *older])  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
