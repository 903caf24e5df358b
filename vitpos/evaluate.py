"""Resolution transfer: evaluate trained checkpoints at other resolutions, with every way each
position scheme offers to serve a grid it was not trained on.

    python -m vitpos.evaluate --ckpt runs/a/checkpoints/last.ckpt runs/b/checkpoints/last.ckpt \\
        --resolutions 24 32 48 64 32x64

For each checkpoint x method x resolution the model's scheme is switched to that method
(``model.pos.method = m``) and top-1 is counted on the evaluation set rendered (``shapes``) or
resized (real images, ``--resize`` / ``--crop-ratio``) to that resolution. The results land in
``DIR/resolution.{json,csv,md,png}``.

Distributed evaluation (``--devices N --strategy ddp``) counts every image exactly once: each
rank reads the shard ``indices[rank::world]`` (no DistributedSampler, which pads with
duplicates), and the (correct, total) counts are summed across ranks. Only rank 0 writes.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from .cli import OneLineParser
from .config import Config, ConfigError
from .model import ViT
from .resolution import Resolution, parse_resolution, resolution_label, to_hw

RESULT_FILES = ("resolution.json", "resolution.csv", "resolution.md", "resolution.png")


# -- inputs ---------------------------------------------------------------------------------------
@dataclass
class EvalData:
    """Overrides of the checkpoint's data config for evaluation; None keeps the checkpoint's value."""

    name: str | None = None
    data_dir: str | None = None
    crop_ratio: float | None = None
    eval_resize: str | None = None
    batch_size: int | None = None
    num_workers: int | None = None
    split: str = "val"
    limit: int | None = None  # only the first `limit` images of the split (quick checks)
    mean: list[float] | None = None
    std: list[float] | None = None
    interpolation: str | None = None


# -- distributed counting -------------------------------------------------------------------------
class ShardSampler(Sampler[int]):
    """Indices rank, rank + world, ...: every item on exactly one rank, no padding, no duplicates."""

    def __init__(self, length: int, rank: int = 0, world_size: int = 1):
        self.indices = range(rank, length, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class TransferEval(L.LightningModule):
    """Counts top-1 hits of ``model`` on one dataloader per (resolution, method).

    ``jobs[i] = (dataset, method)`` is test dataloader i. ``counts[i] = (correct, seen)`` on this
    rank; :func:`evaluate_model` sums them across ranks after ``trainer.test`` returns, so a rank
    with an empty shard cannot leave the others waiting.
    """

    def __init__(
        self,
        model: ViT,
        jobs: list[tuple[Dataset, str]],
        batch_size: int,
        num_workers: int = 0,
        labels: list[str] | None = None,
    ):
        super().__init__()
        self.model = model
        self.jobs, self.batch_size, self.num_workers = jobs, batch_size, num_workers
        self.labels = labels
        self.counts = torch.zeros(len(jobs), 2, dtype=torch.long)
        self._announced = -1

    def test_dataloader(self) -> list[DataLoader]:
        rank, world = self.trainer.global_rank, self.trainer.world_size  # known only once launched
        return [
            DataLoader(
                ds,
                batch_size=self.batch_size,
                sampler=ShardSampler(len(ds), rank, world),  # type: ignore[arg-type]
                num_workers=self.num_workers,
            )
            for ds, _ in self.jobs
        ]

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.labels is not None and dataloader_idx != self._announced:  # progress: one line per job
            self._announced = dataloader_idx
            _note(f"[{dataloader_idx + 1}/{len(self.jobs)}] {self.labels[dataloader_idx]}")
        images, labels = batch
        method = self.jobs[dataloader_idx][1]
        if self.model.pos.method != method:  # the setter clears the scheme's cache: switch only when needed
            self.model.pos.method = method
        hits = (self.model(images).argmax(dim=-1) == labels).sum()
        self.counts[dataloader_idx, 0] += int(hits)
        self.counts[dataloader_idx, 1] += labels.shape[0]


def make_trainer(trainer_kwargs: dict[str, Any] | None = None) -> L.Trainer:
    """A quiet Trainer for evaluation; accelerator/devices/strategy/num_nodes (and precision) pass through."""
    kw = {"accelerator": "cpu", "devices": 1, "strategy": "auto", "num_nodes": 1}
    kw.update({k: v for k, v in (trainer_kwargs or {}).items() if v is not None})
    return L.Trainer(
        **kw,
        use_distributed_sampler=False,  # its padding would count some images twice
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        inference_mode=True,
    )


def evaluate_model(
    model: ViT,
    jobs: list[tuple[Dataset, str]],
    trainer: L.Trainer,
    batch_size: int = 256,
    num_workers: int = 0,
    labels: list[str] | None = None,
) -> list[tuple[int, int]]:
    """(correct, seen) summed over all ranks for each (dataset, method) job; the same on every rank.

    ``labels`` (one per job): printed as each job starts, so a long sweep shows its progress."""
    module = TransferEval(model, jobs, batch_size, num_workers, labels)
    default = model.pos.method
    try:
        trainer.test(module, verbose=False)
    finally:
        model.pos.method = default
    counts = module.counts.to(trainer.strategy.root_device)
    counts = trainer.strategy.reduce(counts, reduce_op="sum")  # all_reduce under DDP; identity alone
    return [(int(c), int(n)) for c, n in counts.cpu().tolist()]


# -- the sweep ------------------------------------------------------------------------------------
# Only rank 0 speaks and writes: Lightning's rank_zero_only reads the launcher's rank from the environment
# until a Trainer launches, and the global rank after.
@rank_zero_only
def _note(msg: str) -> None:
    print(f"vitpos.evaluate: {msg}", file=sys.stderr, flush=True)


def _eval_config(cfg: Config, data: EvalData) -> Config:
    d = cfg.data
    if data.name is not None and data.name != d.name:
        d.name, d.data_dir = data.name, None
    for field, value in (("data_dir", data.data_dir), ("crop_ratio", data.crop_ratio),
                         ("eval_resize", data.eval_resize), ("batch_size", data.batch_size),
                         ("num_workers", data.num_workers), ("mean", data.mean), ("std", data.std),
                         ("interpolation", data.interpolation)):  # fmt: skip
        if value is not None:
            setattr(d, field, value)
    return cfg


@dataclass
class _Plan:
    path: Path
    cfg: Config
    model: ViT
    methods: list[str]


def pretrained_config(pre: Any) -> Config:
    """The Config a pretrained model (:class:`vitpos.pretrained.Pretrained`) is evaluated under: its
    architecture at its own size, and its own preprocessing (timm's data config: mean/std, crop_pct,
    interpolation, crop mode) where it has one."""
    cfg = Config()
    for k, v in pre.arch.items():
        setattr(cfg.model, k, v)
    cfg.model.img_size, cfg.model.num_classes = pre.img_size, pre.model.head.out_features
    cfg.data.name = ""  # no data set of its own: --data names it
    dc = pre.data_config
    if dc:
        cfg.data.mean, cfg.data.std = list(dc["mean"]), list(dc["std"])
        cfg.data.crop_ratio = float(dc.get("crop_pct", 1.0))
        cfg.data.eval_resize = "full" if dc.get("crop_mode") == "squash" else "crop"
        if dc.get("interpolation") in ("bicubic", "bilinear", "nearest"):
            cfg.data.interpolation = dc["interpolation"]
    return cfg


def _load(source: str | Path, init_arch: str | None) -> tuple[Config, ViT]:
    """(config, model) of a vitpos checkpoint, or of an ``--init-from`` SPEC that is not one."""
    from .checkpoint import model_from_checkpoint
    from .pretrained import WEIGHT_SUFFIXES, load_pretrained

    text = str(source)
    if not text.startswith("timm:") and init_arch is None and Path(text).suffix not in WEIGHT_SUFFIXES:
        return model_from_checkpoint(source)
    pre = load_pretrained(text, init_arch)
    return pretrained_config(pre), pre.model


def _plan(
    ckpt_paths: Sequence[str | Path],
    resolutions: Sequence[Resolution],
    methods: Sequence[str] | None,
    init_from: Sequence[str] = (),
    init_arch: str | None = None,
) -> list[_Plan]:
    """Load every checkpoint and pretrained model and check every input before anything is evaluated."""
    from .checkpoint import model_from_checkpoint

    if not ckpt_paths and not init_from:
        raise ConfigError("nothing to evaluate: give --ckpt FILE ... or --init-from SPEC ...")
    if not resolutions:
        raise ConfigError("no resolution given (--resolutions R ...)")
    plans = []
    sources = [(p, True) for p in ckpt_paths] + [(spec, False) for spec in init_from]
    for p, is_ckpt in sources:
        cfg, model = model_from_checkpoint(p) if is_ckpt else _load(p, init_arch)
        for r in resolutions:
            h, w = to_hw(r)
            if h % model.patch_size or w % model.patch_size:
                raise ConfigError(
                    f"resolution {resolution_label(r)} is not a multiple of the patch size {model.patch_size} of {p}"
                )
        plans.append(_Plan(Path(p), cfg, model, list(model.pos.methods)))
    if methods:
        from .pos import POS_REGISTRY

        known = {m: None for cls in POS_REGISTRY.values() for m in cls.methods}
        unknown = [m for m in methods if m not in known]
        if unknown:
            raise ConfigError(f"unknown method(s) {', '.join(unknown)}; valid: {', '.join(known)}")
        for plan in plans:
            lacking = [m for m in methods if m not in plan.model.pos.methods]
            if lacking:
                _note(f"{plan.path}: scheme '{plan.cfg.model.pos}' has no method {', '.join(lacking)}; skipped")
            plan.methods = [m for m in methods if m in plan.model.pos.methods]
        if not any(plan.methods for plan in plans):
            raise ConfigError(f"nothing to evaluate: no checkpoint's scheme offers {', '.join(methods)}")
    return plans


def sweep(
    ckpt_paths: Sequence[str | Path],
    resolutions: Sequence[Resolution | str],
    *,
    methods: Sequence[str] | None = None,
    data: EvalData | None = None,
    trainer_kwargs: dict[str, Any] | None = None,
    init_from: Sequence[str] = (),
    init_arch: str | None = None,
) -> list[dict[str, Any]]:
    """Evaluate every checkpoint (and ``--init-from`` model) x method x resolution; the records, on every rank."""
    from .data import build_datamodule

    data = data or EvalData()
    res = [parse_resolution(r) for r in resolutions]
    res = list(dict.fromkeys(res))  # keep order, drop repeats
    plans = _plan(ckpt_paths, res, methods, init_from, init_arch)
    trainer = make_trainer(trainer_kwargs)
    records = []
    for plan in plans:
        if not plan.methods:
            continue
        cfg = _eval_config(plan.cfg, data)
        if not cfg.data.name:
            raise ConfigError(f"{plan.path} brings no data set: name one with --data (and --data-dir)")
        dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
        if (dm.num_classes, dm.in_chans) != (cfg.model.num_classes, cfg.model.in_chans):
            raise ConfigError(
                f"data set '{cfg.data.name}' has {dm.num_classes} classes and {dm.in_chans} channel(s), but "
                f"{plan.path} was trained for {cfg.model.num_classes} and {cfg.model.in_chans}"
            )
        datasets = {r: dm.eval_dataset(r, data.split) for r in res}
        if data.limit is not None:
            datasets = {r: Subset(ds, range(min(data.limit, len(ds)))) for r, ds in datasets.items()}
        jobs = [(datasets[r], m) for r in res for m in plan.methods]
        labels = [f"{plan.path}: {cfg.model.pos}/{cfg.model.stem} at {resolution_label(r)} px, method {m}"
                  for r in res for m in plan.methods]  # fmt: skip
        counts = evaluate_model(plan.model, jobs, trainer, cfg.data.batch_size, cfg.data.num_workers, labels)
        for (r, m), (correct, seen) in zip([(r, m) for r in res for m in plan.methods], counts, strict=True):
            h, w = to_hw(r)
            records.append(
                {
                    "checkpoint": str(plan.path),
                    "scheme": cfg.model.pos,
                    "stem": cfg.model.stem,
                    "method": m,
                    "default_method": m == plan.model.pos.methods[0],
                    "resolution": h if h == w else f"{h}x{w}",
                    "height": h,
                    "width": w,
                    "train_resolution": cfg.model.img_size,
                    # the resolutions seen in training (several with --train-resolutions)
                    "train_resolutions": list(cfg.trainer.train_resolutions) or [cfg.model.img_size],
                    "patch_size": cfg.model.patch_size,
                    "grid": f"{h // cfg.model.patch_size}x{w // cfg.model.patch_size}",
                    "data": cfg.data.name,
                    "split": data.split,
                    "eval_resize": cfg.data.eval_resize,
                    "crop_ratio": cfg.data.crop_ratio,
                    "num_classes": cfg.model.num_classes,
                    "top1": correct / seen if seen else float("nan"),
                    "correct": correct,
                    "samples": seen,
                }
            )
    return records


# -- reports --------------------------------------------------------------------------------------
def run_labels(records: list[dict[str, Any]]) -> dict[str, str]:
    """checkpoint -> 'scheme/stem', with the checkpoint's run folder added where two would clash."""
    by_ckpt = {r["checkpoint"]: f"{r['scheme']}/{r['stem']}" for r in records}
    clash = {lab for lab in by_ckpt.values() if list(by_ckpt.values()).count(lab) > 1}
    labels = {}
    for ckpt, lab in by_ckpt.items():
        if lab in clash:
            p = Path(ckpt)
            run = p.parent.parent.name if p.parent.name == "checkpoints" else p.parent.name
            lab = f"{lab} ({run}/{p.stem})"
        labels[ckpt] = lab
    return labels


def _sorted_resolutions(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    hws = {(r["height"], r["width"]) for r in records}
    return sorted(hws, key=lambda hw: (hw[0] * hw[1], hw[0] != hw[1], hw))


def markdown_table(records: list[dict[str, Any]]) -> str:
    """Rows run x method, columns resolutions; top-1 in %, bold at the row's training resolution."""
    labels = run_labels(records)
    cols = _sorted_resolutions(records)
    trains = {r["train_resolution"] for r in records}

    def head(hw: tuple[int, int]) -> str:
        lab = resolution_label(hw)
        return f"{lab} (train)" if hw[0] == hw[1] and hw[0] in trains else lab

    rows: dict[tuple[str, str], dict] = {}
    for r in records:
        key = (r["checkpoint"], r["method"])
        rows.setdefault(key, {"label": labels[r["checkpoint"]], "method": r["method"], "train": r["train_resolution"]})
        rows[key][(r["height"], r["width"])] = r["top1"]
    lines = [
        "| scheme/stem | method | " + " | ".join(head(c) for c in cols) + " |",
        "|---|---|" + "---:|" * len(cols),
    ]
    for row in rows.values():
        cells = []
        for c in cols:
            v = row.get(c)
            text = "" if v is None else f"{100 * v:.1f}"
            cells.append(f"**{text}**" if text and c == (row["train"], row["train"]) else text)
        lines.append(f"| {row['label']} | {row['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], ax=None):
    """Top-1 vs resolution, one line per run x method, a dashed vertical line at each training resolution.

    The y axis runs from 0 to 100 % with chance (1 / classes, when the records carry it) drawn as a
    dotted line. The x axis is the side of the equal-area square, sqrt(H*W), so non-square
    resolutions have a place. Colour tells the run, line style and marker the method; markers are
    hollow and lines drawn first are wider, so methods that coincide stay visible under each other.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.8))
    labels = run_labels(records)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 2))]
    markers = ["o", "s", "^", "D", "v", "P"]
    for i, ckpt in enumerate(labels):
        mine = [r for r in records if r["checkpoint"] == ckpt]
        methods = list(dict.fromkeys(r["method"] for r in mine))
        for j, m in enumerate(methods):
            pts = sorted((r for r in mine if r["method"] == m), key=lambda r: r["height"] * r["width"])
            x = [(r["height"] * r["width"]) ** 0.5 for r in pts]
            y = [100 * r["top1"] for r in pts]
            ax.plot(x, y, color=colours[i % len(colours)], linestyle=styles[j % len(styles)],
                    linewidth=max(0.8, 2.4 - 0.5 * j), marker=markers[j % len(markers)],
                    markersize=max(3.0, 7.0 - 1.3 * j), markerfacecolor="none",
                    label=f"{labels[ckpt]} · {m}")  # fmt: skip
    chances = sorted({100 / r["num_classes"] for r in records if r.get("num_classes")})
    for c in chances:
        ax.axhline(c, color="0.35", linestyle=":", linewidth=1.2, label=f"chance ({c:.3g} %)")
    for t in sorted({r["train_resolution"] for r in records}):
        ax.axvline(t, color="0.4", linestyle="--", linewidth=1)
        ax.annotate(f"train {t}", (t, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="0.3")  # fmt: skip
    cols = _sorted_resolutions(records)
    ax.set_xticks([(h * w) ** 0.5 for h, w in cols], [resolution_label(hw) for hw in cols])
    ax.set_ylim(0, 100)
    ax.set_xlabel("test resolution (px)")
    ax.set_ylabel("top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(ax.lines) > 8 else 1, loc="best")
    return ax


def write_results(records: list[dict[str, Any]], out_dir: str | Path) -> Path:
    """DIR/resolution.json, .csv, .md (markdown table) and .png (plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "resolution.json").write_text(json.dumps(records, indent=2) + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    (out / "resolution.csv").write_text(buf.getvalue())
    first = records[0]
    split_note = f"{first['data']} {first['split']} split"
    (out / "resolution.md").write_text(
        f"# Resolution transfer: top-1 (%) on {split_note}\n\n"
        "Bold: the row's training resolution. Samples per cell: "
        f"{', '.join(sorted({str(r['samples']) for r in records}))}.\n\n" + markdown_table(records)
    )
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot(records, ax)
    ax.set_title(f"Resolution transfer ({split_note})")
    fig.tight_layout()
    fig.savefig(out / "resolution.png", dpi=120)
    plt.close(fig)
    return out


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Read an evaluator's resolution.json (or the folder holding it), or the records of a benchmark's
    JSON that keeps them under "records" (docs/resolution.json)."""
    p = Path(path)
    if p.is_dir():
        p = p / "resolution.json"
    data = json.loads(p.read_text())
    return data["records"] if isinstance(data, dict) else data


def default_out(ckpt: str | Path, kind: str = "resolution") -> Path:
    """Where a result on ``ckpt`` goes by default: beside the run it belongs to.

    ``RUN/<kind>/`` for a run's ``checkpoints/last.ckpt`` (where ``train.py --eval-resolutions``
    writes its sweep), ``RUN/<kind>-<stem>/`` for the run's other checkpoints, and
    ``<folder>/<stem>-<kind>/`` for a checkpoint outside a run folder.
    """
    p = Path(ckpt)
    if p.parent.name == "checkpoints":
        run = p.parent.parent
        return run / kind if p.stem == "last" else run / f"{kind}-{p.stem}"
    return p.parent / f"{p.stem}-{kind}"


def check_out(out_dir: str | Path, overwrite: bool) -> None:
    """An earlier result in ``out_dir`` is an error unless ``overwrite``."""
    existing = [f for f in RESULT_FILES if (Path(out_dir) / f).exists()]
    if existing and not overwrite:
        raise ConfigError(
            f"{out_dir} already holds a resolution result ({existing[0]}); pass --overwrite or another --out"
        )


def sweep_and_write(
    ckpt_paths: Sequence[str | Path],
    resolutions: Sequence[Resolution | str],
    out_dir: str | Path | None = None,
    trainer_kwargs: dict[str, Any] | None = None,
    *,
    methods: Sequence[str] | None = None,
    data: EvalData | None = None,
    overwrite: bool = False,
    init_from: Sequence[str] = (),
    init_arch: str | None = None,
) -> list[dict[str, Any]]:
    """Sweep and write the reports (rank 0); returns the records on every rank."""
    if out_dir is not None:
        out = Path(out_dir)
    elif ckpt_paths:
        out = default_out(ckpt_paths[0])
    else:  # a pretrained model has no run folder: runs/<its name>-resolution
        out = Path("runs") / f"{re.sub(r'[^A-Za-z0-9._-]+', '-', Path(init_from[0]).stem)}-resolution"
    if rank_zero_only.rank == 0:
        check_out(out, overwrite)
    records = sweep(ckpt_paths, resolutions, methods=methods, data=data, trainer_kwargs=trainer_kwargs,
                    init_from=init_from, init_arch=init_arch)  # fmt: skip
    if rank_zero_only.rank == 0:
        write_results(records, out)
        _note(f"{len(records)} results in {out}/resolution.{{json,csv,md,png}}")
    return records


# -- command line ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .config import ACCELERATORS, PRECISIONS, data_names, strategy_names
    from .pos import POS_REGISTRY

    methods = ", ".join(dict.fromkeys(m for cls in POS_REGISTRY.values() for m in cls.methods))
    p = OneLineParser(
        prog="python -m vitpos.evaluate",
        description="Evaluate checkpoints at other resolutions with every resolution-transfer method of their scheme.",
    )
    a = p.add_argument
    a("--ckpt", nargs="+", default=[], metavar="FILE", help="checkpoint(s) to evaluate")
    a("--init-from", nargs="+", default=[], metavar="SPEC",
      help="pretrained model(s): timm:NAME (downloads), or a weights file with --init-arch")  # fmt: skip
    a("--init-arch", metavar="NAME", help="timm architecture of the --init-from weights file")
    a("--resolutions", nargs="+", required=True, metavar="R", help="test resolutions: R or HxW")
    a("--methods", nargs="+", metavar="NAME",
      help=f"transfer methods {{{methods}}} (default: every method each scheme offers)")  # fmt: skip
    a("--data", "--data-name", dest="data", metavar="NAME",
      help=f"data set {{{', '.join(data_names())}}} (default: the checkpoint's)")  # fmt: skip
    a("--data-dir", help="where the data set's files are (default: the checkpoint's)")
    a("--crop-ratio", type=float, help="eval crop ratio in (0, 1] (default: the checkpoint's)")
    a("--resize", choices=["crop", "full"], help="eval resize protocol {crop, full} (default: the checkpoint's)")
    a("--interpolation", choices=["bicubic", "bilinear", "nearest"],
      help="resize interpolation {bicubic, bilinear, nearest} (default: as trained or as pretrained)")  # fmt: skip
    a("--mean", type=float, nargs="+", help="normalisation mean per channel (default: as trained)")
    a("--std", type=float, nargs="+", help="normalisation std per channel (default: as trained)")
    a("--split", choices=["val", "test"], default="val", help="the split to score {val, test} (default: val)")
    a("--batch-size", type=int, help="per-device batch size (default: the checkpoint's)")
    a("--num-workers", type=int, help="data loader worker processes (default: the checkpoint's)")
    a("--limit", type=int, help="evaluate only the first N images of the split (quick checks; default: all)")
    a("--accelerator", default="cpu", metavar="NAME", help=f"{{{', '.join(ACCELERATORS)}}} (default: cpu)")
    a("--devices", type=int, default=1, help="devices per node (default: 1)")
    a("--strategy", default="auto", metavar="NAME",
      help=f"Lightning strategy {{{', '.join(strategy_names())}}} (default: auto)")  # fmt: skip
    a("--num-nodes", type=int, default=1, help="nodes (default: 1)")
    a("--precision", default=None, metavar="NAME", help=f"{{{', '.join(PRECISIONS)}}} (default: 32-true)")
    a("--out", help="output folder (default: RUN/resolution/ for RUN/checkpoints/last.ckpt, "
      "RUN/resolution-<stem>/ for another checkpoint of RUN)")  # fmt: skip
    a("--overwrite", action="store_true", help="replace an earlier result in --out")
    return p


def main(argv: list[str] | None = None) -> int:
    from .config import ACCELERATORS, PRECISIONS, strategy_names
    from .training import quiet_logs

    args = build_parser().parse_args(argv)
    quiet_logs()
    try:
        for flag, v in (
            ("--batch-size", args.batch_size),
            ("--devices", args.devices),
            ("--num-nodes", args.num_nodes),
        ):
            if v is not None and v <= 0:
                raise ConfigError(f"{flag} must be a positive integer, got {v}")
        if args.limit is not None and args.limit <= 0:
            raise ConfigError(f"--limit must be a positive integer, got {args.limit}")
        if args.num_workers is not None and args.num_workers < 0:
            raise ConfigError(f"--num-workers must be >= 0, got {args.num_workers}")
        if args.crop_ratio is not None and not 0 < args.crop_ratio <= 1:
            raise ConfigError(f"--crop-ratio must be in (0, 1], got {args.crop_ratio}")
        if args.precision is not None and args.precision not in PRECISIONS:
            raise ConfigError(f"unknown --precision '{args.precision}'; valid: {', '.join(PRECISIONS)}")
        if args.strategy not in strategy_names():
            raise ConfigError(f"unknown --strategy '{args.strategy}'; valid: {', '.join(strategy_names())}")
        if args.accelerator not in ACCELERATORS:
            raise ConfigError(f"unknown --accelerator '{args.accelerator}'; valid: {', '.join(ACCELERATORS)}")
        if args.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
            raise ConfigError(f"--accelerator {args.accelerator}: no CUDA GPU is available here")
        resolutions = [parse_resolution(r) for r in args.resolutions]
        if (args.mean is None) != (args.std is None):
            raise ConfigError("--mean and --std go together")
        data = EvalData(name=args.data, data_dir=args.data_dir, crop_ratio=args.crop_ratio, eval_resize=args.resize,
                        batch_size=args.batch_size, num_workers=args.num_workers, split=args.split,
                        limit=args.limit, mean=args.mean, std=args.std,
                        interpolation=args.interpolation)  # fmt: skip
        trainer_kwargs = {"accelerator": args.accelerator, "devices": args.devices, "strategy": args.strategy,
                          "num_nodes": args.num_nodes, "precision": args.precision}  # fmt: skip
        records = sweep_and_write(args.ckpt, resolutions, args.out, trainer_kwargs, methods=args.methods,
                                  data=data, overwrite=args.overwrite, init_from=args.init_from,
                                  init_arch=args.init_arch)  # fmt: skip
    except ConfigError as e:
        print(f"vitpos.evaluate: error: {e}", file=sys.stderr)
        return 2
    if rank_zero_only.rank == 0:
        print(markdown_table(records), end="")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Tear the process group down here rather than in interpreter shutdown, where its threads can still be
        # running (a DDP evaluation process once aborted at exit with "terminate called without an active exception").
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
