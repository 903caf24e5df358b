"""The study behind docs/summary.md: which position scheme, and what happens when the image gets bigger.

    python -m benchmarks.study --jobs 2          # trains what is missing, sweeps it, chooses, writes docs/study.json
    python -m benchmarks.pages                   # docs/summary.md, docs/summary.png and the README's table

The protocol, frozen before test is read:

1. Runs: ``python train.py --pos P --stem S --seed K`` at the defaults for the six main runs over ``--seeds``. The
   position rule and `relbias`'s start were chosen on validation top-1 (docs/protocol.json records how).
2. Validation sweep: every checkpoint on the first ``--val-limit`` validation images at every ``--sizes`` size,
   under both regimes (zoom: the scene grows with the image; canvas: the scene keeps its training size on a larger
   background; vitpos.regime), with every transfer method its scheme offers.
3. Choice: each scheme's transfer method is the one with the highest mean validation top-1 over its seeds, the sizes
   other than the training size and both regimes. It is written into the JSON before any test number is read.
4. Test: the whole test split, every size, both regimes, every method (each record names its split);
   ``--test-methods chosen``: the chosen method only, for a study whose pages read nothing else.
5. Controls (canvas, above the training size, the chosen method): pooling over the scene's tokens only, log-n logit
   scaling, and the scene shifted off the patch grid by half a patch: what the canvas changes besides position.
6. Far sizes (``--far``, 128 px = 4x by default): the whole test split under both regimes with the chosen method
   only. The choice is made at ``--sizes``; a 4x cell costs about as much as all of them together, so it is
   measured once, for the method the protocol serves. ``--no-far`` skips it.
7. Attention entropy per block and head at each size and regime (64 test images, the chosen method): whether
   attention stays focused as the grid grows, the explanation the FIRE extrapolation study gives.
8. Patch-shuffle test at the training size (the whole test split, one fixed permutation of the patches;
   vitpos.diagnose): whether a model is blind to patch order, which is what the bag-of-patches ceiling assumes.
9. Fine-tuned (``--finetune``, 64 px = 2x by default): each run trained one more epoch at that size from its last
   checkpoint (``train.py --init-from``, which starts where the scheme's default method serves the new grid: a
   scheme with nothing grid-sized keeps its training grid, ``--pos-grid``, and a grid-sized table is carried), then
   tested there on the whole test split. The fine-tuning recipe (FINETUNE: a quarter of the learning rate, a short
   warmup) is Swin v2's, fixed beforehand and not tuned on any split. ``--no-finetune`` skips it.

Another data set and training size: ``--config configs/fashion_mnist_study.yaml --img-size 16 --sizes 12 16 20 24
28 --far --finetune`` trains on Fashion-MNIST downsampled to 16 px and tests up to its native 28 px, so the larger
sizes carry real detail (zoom), or the 16 px garment on a larger canvas. ``--rule off`` trains every run without the
position rule (the ablation); ``--pos-aug AUG`` with position augmentation; ``--train-resolutions 16 24 32 48`` at
those sizes, one per batch (the multi-resolution baseline: the same steps and, on average, the same tokens per batch
as 32 px alone). Such a study has its own ``--out`` and ``--json``.

A checkpoint keeps its records while its SHA-256 and the sweep's arguments are unchanged: an interrupted study goes
on where it stopped, and only new or retrained runs are evaluated. A record resumes only under the budget, rule,
augmentation and training sizes it was made with; other settings stop with an error. Every run and record names its
provenance (hardware, device, commit, torch, ckpt_sha256).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from benchmarks.common import (
    MAIN_RUNS,
    ROOT,
    cores_per_job,
    fingerprint,
    has_pos_params,
    provenance,
    run_specs,
    study_budget,
    study_run,
    train_run,
    write_record,
)
from benchmarks.rules import pos_rule, pos_rule_of
from vitpos.config import Config
from vitpos.errors import ConfigError
from vitpos.pos.base import PosAug

SIZES = ["24", "32", "48", "64"]
FAR = ["128"]
FINETUNE_SIZES = ["64"]
# one epoch at a quarter of the 32 px runs' peak learning rate, as Swin v2 fine-tunes at a larger size
FINETUNE = ["--epochs", "1", "--lr", "0.00025", "--warmup-epochs", "0.1"]
FINETUNE_SLUG = "e{}-lr{}-w{}".format(*FINETUNE[1::2])  # a fine-tuning run's folder names its recipe


# The canvas controls, each on the test split with the scheme's chosen method: what the canvas changes besides
# position. `scene`: pool only the scene's tokens (the background no longer dilutes the averaged features);
# `logn`: logits x log N / log N_train (attention no longer spreads over the added keys); `offgrid`: the scene
# shifted by half a patch (every patch cuts the objects differently from training).
CONTROLS = {"scene": {"pool": "scene"}, "logn": {"logit_scaling": "logn"}, "offgrid": {"shift": "half-patch"}}


def spec_of(record: dict) -> str:
    return f"{record['scheme']}:{record['stem']}"


def check_pos_aug(p: argparse.ArgumentParser, aug: str, specs: list[str]) -> None:
    """A position augmentation that parses and that every run's scheme can take, or the parser's one-line error."""
    from vitpos import create_model

    try:
        parsed = PosAug.parse(aug)
    except ValueError as e:
        p.error(f"--pos-aug {aug}: {e}")
    if not parsed.on:
        p.error(f"--pos-aug {aug} turns augmentation off: leave the flag out for the runs without it")
    for spec in specs:
        try:
            create_model(spec.partition(":")[0], embed_dim=16, depth=1, num_heads=2, pos_aug=parsed)
        except ValueError as e:
            p.error(f"--pos-aug with {spec}: {e}")


def sweep_checkpoint(ckpt: Path, split: str, sizes: list[str], limit: int | None, methods: list[str] | None = None,
                     regimes: tuple[str, ...] = ("zoom", "canvas"), **control: str) -> list[dict]:  # fmt: skip
    """Every method (or ``methods``) of the checkpoint's scheme at every size under ``regimes``, on ``split`` (its
    first ``limit`` images; None: all), with a ``control`` of CONTROLS."""
    from vitpos import evaluate as ev
    from vitpos.checkpoint import config_from_checkpoint, load_checkpoint
    from vitpos.regime import Canvas

    shift = 0
    if control.pop("shift", None) == "half-patch":
        shift = config_from_checkpoint(load_checkpoint(ckpt)).model.patch_size // 2
    data = ev.EvalData(split=split, limit=limit, regimes=regimes, canvas=Canvas(shift=shift), **control)
    return ev.sweep([ckpt], sizes, methods=methods, data=data)


def choose_methods(records: list[dict], train_size: int) -> dict[str, dict]:
    """Per scheme (POS:STEM): the method with the highest mean validation top-1 over seeds, sizes other than the
    training size and both regimes; with every method's mean, so the page can show the margin."""
    score: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["split"] == "val" and r["resolution"] != train_size:
            score[f"{r['scheme']}:{r['stem']}"][r["method"]].append(r["top1"])
    out = {}
    for spec, by_method in score.items():
        means = {m: sum(v) / len(v) for m, v in by_method.items()}
        out[spec] = {"method": max(means, key=lambda m: (means[m], m)), "val_mean": means,
                     "cells": len(next(iter(by_method.values())))}  # fmt: skip
    return out


def entropy_rows(ckpt: Path, method: str, sizes: list[str], images: int = 64) -> list[dict]:
    """Attention entropy (nats; vitpos.diagnose.attention_entropy) per block and head of the first ``images`` test
    images, at each size under each regime, with ``method``: whether attention stays focused as the grid grows."""
    import torch

    from vitpos.checkpoint import model_from_checkpoint
    from vitpos.data import build_datamodule
    from vitpos.diagnose import attention_entropy
    from vitpos.regime import Canvas

    cfg, model = model_from_checkpoint(ckpt)
    model.pos.method = method
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    train = cfg.model.img_size
    rows = []
    for regime in ("zoom", "canvas"):
        for size in sizes:
            side = int(size)
            if regime == "canvas" and side <= train:
                continue
            window = Canvas().window((side, side), (train, train), model.patch_size) if regime == "canvas" else None
            ds = dm.eval_dataset(side, "test", window)
            batch = torch.stack([ds[i][0] for i in range(min(images, len(ds)))])
            with torch.no_grad():
                h = attention_entropy(model, batch)  # (depth, heads)
            n = (side // model.patch_size) ** 2
            rows.append({"regime": regime, "resolution": side, "method": method, "images": len(batch),
                         "entropy": h.tolist(), "log_n": math.log(n)})  # fmt: skip
    return rows


def shuffle_row(ckpt: Path) -> dict:
    """The patch-shuffle test (vitpos.diagnose.patch_shuffle_test) of a checkpoint on its whole test split at the
    training size: top-1 with the patches in place and permuted."""
    from torch.utils.data import DataLoader

    from vitpos.checkpoint import model_from_checkpoint
    from vitpos.data import build_datamodule
    from vitpos.diagnose import patch_shuffle_test

    cfg, model = model_from_checkpoint(ckpt)
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    loader = DataLoader(dm.eval_dataset(cfg.model.img_size, "test", None), batch_size=250)
    return patch_shuffle_test(model.eval(), loader)


def fine_tune_start(ckpt: Path) -> str | None:
    """The method whose service of a new grid a fine-tuning run from ``ckpt`` starts from, where the run keeps the
    scheme at its training grid (``PosScheme.serves_by_method``: the scheme's default method); None where the run
    carries the scheme's grid-sized state there instead (by that same method) or the scheme has one method."""
    from vitpos.checkpoint import model_from_checkpoint

    pos = model_from_checkpoint(ckpt)[1].pos
    return pos.methods[0] if pos.serves_by_method else None


def data_budget(cfg: Config) -> dict:
    """What a study's budget names of its data: the generated sizes for `shapes`, the subset and holdout otherwise."""
    d = cfg.data
    if d.name == "shapes":
        return {"train_size": d.train_size, "val_size": d.val_size, "test_size": d.test_size}
    return {"train_limit": d.train_limit, "holdout_size": d.holdout_size}


def split_size(cfg: Config, split: str) -> int:
    """The images of ``split`` of ``cfg``'s data set: the generated size for `shapes`, counted otherwise."""
    if cfg.data.name == "shapes":
        return cfg.data.val_size if split == "val" else cfg.data.test_size
    from vitpos.data import build_datamodule

    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    return len(dm.eval_dataset(cfg.model.img_size, split))


def checkpoint_split_size(ckpt: Path, split: str) -> int:
    """The images of ``split`` of the data set a checkpoint was trained on (its saved config)."""
    from vitpos.checkpoint import config_from_checkpoint, load_checkpoint

    return split_size(config_from_checkpoint(load_checkpoint(ckpt)), split)


def complete(fresh: list[dict], expected: int, where: Path) -> list[dict]:
    """The records that counted every image they were asked to (a run stopped early, by a signal say, counts
    fewer); those that did not are reported and left out, so the next pass sweeps them again."""
    short = [r for r in fresh if r["samples"] != expected]
    if short:
        print(f"{where}: {len(short)} cell(s) counted fewer than {expected} images; not recorded", flush=True)
    return [] if short else fresh


@dataclass
class Cells:
    """A record's resolution cells: each sweep of a checkpoint measured once, stamped with where it was made, the
    record written after each sweep."""

    records: list[dict]
    save: Callable[[], None]
    images: Callable[[str], int]  # the images of a split, all of which a sweep without a limit must count

    def has(self, sha: str, sweep: dict) -> bool:
        """Whether this sweep of the checkpoint with this SHA-256 is in the record."""
        return any(r.get("ckpt_sha256") == sha and r.get("sweep") == sweep for r in self.records)

    def measure(self, run: dict, ckpt: Path, sha: str, sweep: dict, *how, extra: dict | None = None,
                **control: str) -> None:  # fmt: skip
        """``sweep_checkpoint(ckpt, *how, **control)``'s records under ``sweep``, unless that sweep of this checkpoint
        is recorded; they replace its earlier records of the same sweep. Each cell must count the sweep's limit of
        images, or its whole split."""
        if self.has(sha, sweep):
            return
        stamp = provenance() | {"ckpt_sha256": sha, "train_commit": run.get("commit"), **(extra or {})}
        n = self.images(sweep["split"])
        fresh = complete(sweep_checkpoint(ckpt, *how, **control), min(sweep["limit"] or n, n), ckpt)
        self.records[:] = [r for r in self.records if not (r["checkpoint"] == str(ckpt) and r.get("sweep") == sweep)]
        self.records.extend(r | stamp | {"sweep": sweep, "seed": run["seed"], "run": run["run"]} for r in fresh)
        self.save()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS, metavar="POS:STEM")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                   help="the seeds trained and fine-tuned (every recorded run is swept)")  # fmt: skip
    p.add_argument("--sizes", nargs="+", default=SIZES, help="test sizes (px); the canvas regime uses those >= 32")
    p.add_argument("--far", nargs="*", default=FAR,
                   help="sizes (px) tested with the chosen method only, after the choice (none: skip)")  # fmt: skip
    p.add_argument("--no-far", dest="far", action="store_const", const=[], help="skip the far sizes")
    p.add_argument("--finetune", nargs="*", default=FINETUNE_SIZES,
                   help="sizes (px) each run is fine-tuned at for one epoch, then tested (none: skip)")  # fmt: skip
    p.add_argument("--no-finetune", dest="finetune", action="store_const", const=[], help="skip the fine-tuning")
    p.add_argument("--val-limit", type=int, default=1000, help="validation images per cell for the choice")
    p.add_argument("--out", default="runs/bench-shapes", help="folder of the training runs")
    p.add_argument("--json", default=str(ROOT / "docs" / "study.json"))
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, each with cores / jobs threads")
    p.add_argument("--no-train", action="store_true", help="sweep only the runs already trained")
    p.add_argument(
        "--pos-aug",
        metavar="AUG",
        help="train every run with this position augmentation (train.py's "
        "--pos-aug, e.g. shift=0.1,jitter=1.2,rescale=2); its runs' folders name it: use its own --json",
    )
    p.add_argument("--config", help="the training config of every run (configs/*.yaml; default: train.py's)")
    p.add_argument("--img-size", type=int, help="the training size (px; default: the config's)")
    p.add_argument("--rule", choices=("default", "off"), default="default",
                   help="the position rule of runs with position parameters: the default, or none")  # fmt: skip
    p.add_argument("--train-resolutions", type=int, nargs="+", metavar="PX",
                   help="train every run at these sizes, one per batch (train.py's --train-resolutions): the "
                        "multi-resolution baseline; its runs' folders name them: use its own --json")  # fmt: skip
    p.add_argument("--test-methods", choices=("all", "chosen"), default="all",
                   help="the methods step 4 tests: every one (the pages' grey lines and one-method comparisons), "
                        "or each scheme's chosen one only, for a study whose pages read nothing else")  # fmt: skip
    p.add_argument("--controls", action=argparse.BooleanOptionalAction, default=True,
                   help="sweep the canvas controls (scene pooling, log-n scaling, off the patch grid)")  # fmt: skip
    args = p.parse_args(argv)
    threads = cores_per_job(p, args.jobs)
    run_specs(p, args.runs)
    if args.pos_aug is not None:
        check_pos_aug(p, args.pos_aug, args.runs)
    try:
        cfg = Config.from_yaml(ROOT / args.config) if args.config else Config()
    except ConfigError as e:
        p.error(str(e))
    for size in ([args.img_size] if args.img_size is not None else []) + (args.train_resolutions or []):
        if size <= 0 or size % cfg.model.patch_size:
            p.error(f"size {size} px is not a positive multiple of the patch size {cfg.model.patch_size}")
    if args.img_size is not None:
        cfg.model.img_size = args.img_size
    # every run's data and training size; a fine-tuning run sets its own size
    data_flags = ["--config", args.config] if args.config else []
    size_flags = ["--img-size", str(args.img_size)] if args.img_size is not None else []
    out = ROOT / args.out
    rule = pos_rule_of(vars(cfg.optim)) if args.rule == "default" else pos_rule(1.0)
    path = Path(args.json)
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    records: list[dict] = earlier.get("records", [])
    entropy: list[dict] = earlier.get("entropy", [])
    shuffle: list[dict] = earlier.get("shuffle", [])
    finetuned: list[dict] = earlier.get("finetuned", [])
    runs: dict[str, dict] = {r["run"]: r for r in earlier.get("runs", [])}
    images = cache(partial(split_size, cfg))  # read once, when a sweep first needs it
    budget = study_budget(cfg, data=cfg.data.name, config=args.config, **data_budget(cfg),
                          **{f"rule_{k}": v for k, v in rule.items()})  # fmt: skip

    # a study resumes its record only under the settings that made it: runs of two budgets would share one table (a
    # budget field an older record does not name was not recorded then, so it is not held against it)
    now = {"pos_aug": args.pos_aug, "train_resolutions": args.train_resolutions,
           **{f"budget.{k}": v for k, v in json.loads(json.dumps(budget)).items()}}  # fmt: skip
    before = {"pos_aug": earlier.get("pos_aug"), "train_resolutions": earlier.get("train_resolutions"),
              **{f"budget.{k}": v for k, v in earlier.get("budget", {}).items()}}  # fmt: skip
    if apart := sorted(k for k in now.keys() & before.keys() if earlier and now[k] != before[k]):
        p.error(
            f"{path} holds a study made with other settings ({', '.join(apart)}): resume it with its own flags, "
            "or write to another --json"
        )
    choices: dict = earlier.get("choices", {})

    def save() -> None:
        write_record(path, "study.py", argv, budget=budget, specs=args.runs, seeds=args.seeds, sizes=args.sizes,
                     pos_aug=args.pos_aug, train_resolutions=args.train_resolutions, far=args.far,
                     finetune=args.finetune, finetune_recipe=FINETUNE, val_limit=args.val_limit,
                     runs=list(runs.values()), choices=choices, records=records, entropy=entropy, shuffle=shuffle,
                     finetuned=finetuned)  # fmt: skip

    # 1. the runs, seed by seed, so that a study cut short has every scheme at the seeds it reached
    jobs = [(spec, seed) for seed in args.seeds for spec in args.runs]
    if args.jobs > 1:
        os.environ["OMP_NUM_THREADS"] = str(threads)

    def train(job: tuple[str, int]) -> dict | None:
        spec, seed = job
        pos, _, stem = spec.partition(":")
        run_dir, flags = study_run(out, pos, stem, seed, rule, {}, has_pos_params(spec), args.pos_aug,
                                   args.train_resolutions)  # fmt: skip
        if args.no_train and not (run_dir / "results.json").is_file():
            return None
        aug = {} if args.pos_aug is None else {"pos_aug": str(PosAug.parse(args.pos_aug))}
        aug |= {"train_resolutions": args.train_resolutions} if args.train_resolutions else {}
        return {"spec": spec, "pos": pos, "stem": stem, "seed": seed, **aug,
                **train_run(run_dir, [*data_flags, *size_flags, *flags])}  # fmt: skip

    with ThreadPoolExecutor(args.jobs) as pool:
        for run in pool.map(train, jobs):
            if run is not None:
                runs[run["run"]] = run
    save()

    cells = Cells(records, save, images)

    def trained(chosen: bool = False) -> Iterator[tuple[dict, Path, str, str | None]]:
        """Each run with a last checkpoint (``chosen``: and a method chosen for its scheme): the run, the checkpoint,
        its SHA-256 and that method."""
        for run in list(runs.values()):
            ckpt = ROOT / run["run"] / "checkpoints" / "last.ckpt"
            method = choices.get(run["spec"], {}).get("method")
            if ckpt.is_file() and (method is not None or not chosen):
                yield run, ckpt, fingerprint(ckpt), method

    # 2-4. validation sweep, choice, test sweep; each checkpoint once per (sha, split, sizes, limit)
    for split, limit in (("val", args.val_limit), ("test", None)):
        if split == "test":
            choices = choose_methods(records, cfg.model.img_size)
            save()  # the choice is on disk before test is read
        for run, ckpt, sha, method in trained():
            sweep = {"split": split, "sizes": args.sizes, "limit": limit}
            if split == "test" and args.test_methods == "chosen" and method is not None:
                if cells.has(sha, sweep):
                    continue  # every method is tested already, the chosen one with them
                cells.measure(run, ckpt, sha, sweep | {"method": method}, split, args.sizes, limit, [method])
            else:
                cells.measure(run, ckpt, sha, sweep, split, args.sizes, limit)

    # the records of an earlier choice's method (controls, far sizes) go: a page reads the current choice only
    stale = [
        r for r in records if r.get("sweep", {}).get("method") not in (None, choices.get(spec_of(r), {}).get("method"))
    ]
    if stale:
        records[:] = [r for r in records if r not in stale]
        save()

    # 5. the canvas controls, above the training size, with each scheme's chosen method
    above = [s for s in args.sizes if int(s) > cfg.model.img_size]
    for run, ckpt, sha, method in trained(chosen=True) if args.controls and above else ():
        for name, control in CONTROLS.items():
            sweep = {"split": "test", "sizes": above, "limit": None, "control": name, "method": method}
            cells.measure(run, ckpt, sha, sweep, "test", above, None, [method], ("canvas",),
                          extra={"control": name}, **control)  # fmt: skip

    # 6. the far sizes: test, the chosen method only
    for run, ckpt, sha, method in trained(chosen=True) if args.far else ():
        sweep = {"split": "test", "sizes": args.far, "limit": None, "method": method}
        cells.measure(run, ckpt, sha, sweep, "test", args.far, None, [method])

    # 7. attention entropy at each size and regime, with each scheme's chosen method
    for run, ckpt, sha, method in trained(chosen=True):
        key = {"sizes": args.sizes + list(args.far), "method": method}
        if any(e.get("ckpt_sha256") == sha and e.get("sweep") == key for e in entropy):
            continue
        stamp = provenance() | {"ckpt_sha256": sha, "train_commit": run.get("commit"), "sweep": key,
                                "spec": run["spec"], "seed": run["seed"], "run": run["run"]}  # fmt: skip
        entropy[:] = [e for e in entropy if e["run"] != run["run"]] + [
            row | stamp for row in entropy_rows(ckpt, method, key["sizes"])]  # fmt: skip
        save()

    # 8. the patch-shuffle test at the training size
    for run, ckpt, sha, _ in trained():
        if any(e.get("ckpt_sha256") == sha for e in shuffle):
            continue
        stamp = provenance() | {"ckpt_sha256": sha, "train_commit": run.get("commit"), "spec": run["spec"],
                                "seed": run["seed"], "run": run["run"]}  # fmt: skip
        shuffle[:] = [e for e in shuffle if e["run"] != run["run"]] + [shuffle_row(ckpt) | stamp]
        save()

    # 9. fine-tuned at each --finetune size, seed by seed, then tested there (train.py's own test)
    def finetune(job: tuple[dict, Path, str, str]) -> dict | None:
        run, ckpt, sha, size = job
        start = fine_tune_start(ckpt)
        if any(f["from_sha256"] == sha and f["size"] == int(size) and f["recipe"] == FINETUNE
               and f.get("start") == start for f in finetuned):  # fmt: skip
            return None
        flags = [*data_flags, "--init-from", str(ckpt), "--img-size", size, "--seed", str(run["seed"]), *FINETUNE]
        kept = f"-from-{start}" if start else ""  # a folder of its own: a run that rebuilt the scheme is kept apart
        res = train_run(out / "finetune" / f"{Path(run['run']).name}-ft{size}{kept}-{FINETUNE_SLUG}", flags)
        made = {k: res[k] for k in ("hardware", "device", "commit", "torch", "ckpt_sha256") if k in res}
        return {"spec": run["spec"], "seed": run["seed"], "run": run["run"], "size": int(size), "recipe": FINETUNE,
                "from_sha256": sha, "top1": res["test_top1"], "finetune_run": res["run"], **made,
                **({"start": start} if start else {})}  # fmt: skip

    # fine-tuning is training: the runs of --seeds, as step 1 trains them
    order = sorted((t for t in trained() if t[0]["seed"] in args.seeds), key=lambda t: (t[0]["seed"], t[0]["spec"]))
    tunes = [(run, ckpt, sha, size) for run, ckpt, sha, _ in order for size in args.finetune]
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(finetune, tunes):
            if row is not None:
                finetuned[:] = [f for f in finetuned if (f["run"], f["size"]) != (row["run"], row["size"])] + [row]
                save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
