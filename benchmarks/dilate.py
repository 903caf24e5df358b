"""Is the zoom fall of a model with a position convolution the kernel's reach? PEG's 3x3 kernel covers a fixed
number of tokens; under zoom the scene spans more tokens, so the kernel sees a smaller part of it than in training.

    python -m benchmarks.dilate --json docs/fashion_mnist_dilate.json   # every PEG run of the Fashion-MNIST study
    python -m benchmarks.pages                                         # its section of docs/fashion_mnist_study.md

Each checkpoint of a study's record whose scheme has a `peg` part is evaluated above its training size with the
method validation chose for its scheme, once as it is (`conv`) and once with PEG's kernel dilated by the grid's
scale (`dilate`, the rest of the method unchanged), under zoom and under canvas, on the first ``--val-limit``
validation images and on the whole test split. Both sides are measured here, by one process and one commit, so a
difference is the dilation's alone. Canvas is the control: there the scene keeps its training size in tokens, so a
kernel dilated by the grid's scale reaches past what it saw in training.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import cache, partial
from pathlib import Path

from benchmarks.common import ROOT, fingerprint, run_results, study_above, write_record


def dilated(pos: str, method: str) -> str | None:
    """``method`` of the scheme ``pos`` with its `peg` part's method set to `dilate` (None: the scheme has no `peg`)."""
    parts, methods = pos.split("+"), method.split("+")
    if "peg" not in parts or len(parts) != len(methods):
        return None
    return "+".join("dilate" if part == "peg" else m for part, m in zip(parts, methods, strict=True))


def above(study: dict, train: int) -> list[str]:
    """The study's sizes and far sizes above its training size."""
    return sorted({s for s in [*study.get("sizes", []), *(study.get("far") or [])] if int(s) > train}, key=int)


def same_run(ckpt: Path, run: dict) -> bool:
    """Whether the run beside ``ckpt`` is the recorded ``run`` trained again: a checkpoint file holds more than the
    weights (its path, timing), so a run trained again by the same command on the same kind of machine has another
    SHA-256; its own test top-1 (train.py's, in results.json) must then equal the recorded one exactly."""
    results = ckpt.parent.parent / "results.json"
    try:
        return run_results(json.loads(results.read_text()))["test_top1"] == run["test_top1"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default=str(ROOT / "docs" / "fashion_mnist_study.json"),
                   help="the record whose runs are measured")  # fmt: skip
    p.add_argument("--sizes", nargs="+", metavar="PX",
                   help="test sizes (default: the study's sizes and far sizes above its training size)")  # fmt: skip
    p.add_argument("--val-limit", type=int, default=1000, help="validation images per cell")
    p.add_argument("--json", default=str(ROOT / "docs" / "fashion_mnist_dilate.json"))
    args = p.parse_args(argv)
    study, train, named, sizes = study_above(p, args.study, args.sizes, above)
    choices = study.get("choices", {})
    pairs = {spec: (c["method"], d) for spec, c in choices.items() if (d := dilated(spec.split(":")[0], c["method"]))}
    if not pairs:
        p.error(f"--study {args.study}: no scheme with a `peg` part has a chosen method")
    target = Path(args.json)
    records: list[dict] = json.loads(target.read_text()).get("records", []) if target.is_file() else []
    # the records of an earlier choice's method go: the page reads each scheme's current pair only
    records[:] = [r for r in records if r["sweep"]["methods"] == list(pairs.get(r["spec"], ()))]
    from benchmarks import study as st  # after the arguments: it imports torch

    def save() -> None:
        write_record(target, "dilate.py", argv, study=named, train_size=train, sizes=sizes, records=records)

    cells = None
    for run in study.get("runs", []):
        ckpt = ROOT / run["run"] / "checkpoints" / "last.ckpt"
        if run["spec"] not in pairs or not ckpt.is_file():
            continue
        sha = fingerprint(ckpt)
        if sha != run.get("ckpt_sha256", sha) and not same_run(ckpt, run):
            p.error(f"{ckpt}: not the run {args.study} recorded (another SHA-256 and test top-1); train it again by "
                    "the study's command or measure the record that names it")  # fmt: skip
        if cells is None:  # a study's runs share one data set: its split sizes from the first checkpoint's config
            cells = st.Cells(records, save, cache(partial(st.checkpoint_split_size, ckpt)))
        methods = list(pairs[run["spec"]])
        for split, limit in (("val", args.val_limit), ("test", None)):
            key = {"split": split, "sizes": sizes, "limit": limit, "methods": methods}
            cells.measure(run, ckpt, sha, key, split, sizes, limit, methods, ("zoom", "canvas"),
                          extra={"spec": run["spec"], "recorded_sha256": run.get("ckpt_sha256")})  # fmt: skip
    if cells is None:
        p.error(f"{args.study}: no run of a scheme with a `peg` part has its checkpoint here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
