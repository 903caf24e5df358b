"""Does log-n attention scaling serve a larger grid under zoom too? The canvas control that recovers a large part of
every scheme's canvas fall (docs/summary.md), measured where objects grow with the image.

    python -m benchmarks.logn --json docs/logn.json     # every run of docs/study.json, its chosen method
    python -m benchmarks.pages                          # docs/logn.md

Each checkpoint of a study's record is evaluated under zoom at the sizes above its training size with the method
validation chose for its scheme, once as it is and once with every attention logit multiplied by
log N / log N_train (``--logit-scaling logn``), on the first ``--val-limit`` validation images and on the whole test
split. Both sides are measured here, by one process and one commit, so a difference is the scaling's alone. The
validation side says whether the protocol would choose the scaling; the test side is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import cache, partial
from pathlib import Path

from benchmarks.common import ROOT, fingerprint, study_above, write_record

SCALINGS = ("none", "logn")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default=str(ROOT / "docs" / "study.json"), help="the record whose runs are measured")
    p.add_argument("--sizes", nargs="+", metavar="PX", help="test sizes (default: the study's above its training size)")
    p.add_argument("--val-limit", type=int, default=1000, help="validation images per cell")
    p.add_argument("--json", default=str(ROOT / "docs" / "logn.json"))
    args = p.parse_args(argv)
    study, train, named, sizes = study_above(
        p, args.study, args.sizes, lambda record, train: [s for s in record.get("sizes", []) if int(s) > train]
    )
    target = Path(args.json)
    records: list[dict] = json.loads(target.read_text()).get("records", []) if target.is_file() else []
    choices = study.get("choices", {})
    # the records of an earlier choice's method go: the page reads each scheme's current method only
    records[:] = [r for r in records if r["sweep"]["method"] == choices.get(r["spec"], {}).get("method")]
    from benchmarks import study as st  # after the arguments: it imports torch

    def save() -> None:
        write_record(target, "logn.py", argv, study=named, train_size=train, sizes=sizes, records=records)

    cells = None
    for run in study.get("runs", []):
        ckpt = ROOT / run["run"] / "checkpoints" / "last.ckpt"
        method = choices.get(run["spec"], {}).get("method")
        if method is None or not ckpt.is_file():
            continue
        if cells is None:  # a study's runs share one data set: its split sizes from the first checkpoint's config
            cells = st.Cells(records, save, cache(partial(st.checkpoint_split_size, ckpt)))
        sha = fingerprint(ckpt)
        for split, limit in (("val", args.val_limit), ("test", None)):
            for scaling in SCALINGS:
                key = {"split": split, "sizes": sizes, "limit": limit, "logit_scaling": scaling, "method": method}
                cells.measure(run, ckpt, sha, key, split, sizes, limit, [method], ("zoom",),
                              extra={"spec": run["spec"]}, logit_scaling=scaling)  # fmt: skip
    if not records:
        p.error(f"{args.study}: no run with a checkpoint and a chosen method to measure")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
