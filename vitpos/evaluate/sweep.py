"""The sweep: top-1 of every checkpoint x transfer method x resolution.

For each job the model's scheme is switched to the method (``model.pos.method = m``) and top-1 is counted
on the evaluation set rendered (``shapes``) or resized (real images) to that resolution.

Distributed evaluation (``--devices N --strategy ddp``) counts every image exactly once: each rank reads
the items ``rank, rank + world, ...`` (Lightning's ``UnrepeatedDistributedSampler``, as training's validation does;
a DistributedSampler would pad with duplicates), and the (correct, total) counts are summed across ranks.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset

from ..config import Config
from ..errors import ConfigError
from ..model import ViT
from ..regime import REGIMES, Canvas, Window
from ..resolution import Resolution, parse_resolution, resolution_label, to_hw


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
    # the transfer regimes to measure (vitpos.regime) and, for canvas, where the trained view sits
    regimes: tuple[str, ...] = ("zoom",)
    canvas: Canvas = dataclasses.field(default_factory=Canvas)
    # evaluation controls: pool over the scene's own tokens only ("scene"; canvas), and log-n logit scaling
    pool: str = "all"
    logit_scaling: str = "none"
    max_image_pixels: int | None = None  # PIL's pixel limit per image


POOLS = ("all", "scene")
LOGIT_SCALINGS = ("none", "logn")


@dataclass(frozen=True)
class EvalJob:
    """One evaluation: a data set under one transfer method, and the controls it is scored with."""

    dataset: Dataset
    method: str
    pool_mask: Tensor | None = None  # (h, w) bool: average only these patch tokens
    logit_scale: float = 1.0  # multiplies every block's attention logits


def logn_scale(grid: tuple[int, int], train_grid: tuple[int, int]) -> float:
    """log-n scaling: log N / log N_train for N tokens on ``grid`` (the logit factor that keeps a softmax over N
    keys as sharp as over the N_train it was trained on)."""
    return math.log(grid[0] * grid[1]) / math.log(train_grid[0] * train_grid[1])


# -- distributed counting -------------------------------------------------------------------------
class TransferEval(L.LightningModule):
    """Counts top-1 hits of ``model`` on one dataloader per (resolution, method).

    ``jobs[i] = (dataset, method)`` is test dataloader i. ``counts[i] = (correct, seen)`` on this
    rank; :func:`evaluate_model` sums them across ranks after ``trainer.test`` returns, so a rank
    with an empty shard cannot leave the others waiting.
    """

    def __init__(
        self,
        model: ViT,
        jobs: list[EvalJob | tuple[Dataset, str]],
        batch_size: int,
        num_workers: int = 0,
        labels: list[str] | None = None,
    ):
        super().__init__()
        self.model = model
        self.jobs = [job if isinstance(job, EvalJob) else EvalJob(*job) for job in jobs]
        self.batch_size, self.num_workers = batch_size, num_workers
        self.labels = labels
        self.counts = torch.zeros(len(jobs), 2, dtype=torch.long)
        self._announced = -1

    def test_dataloader(self) -> list[DataLoader]:
        rank, world = self.trainer.global_rank, self.trainer.world_size  # known only once launched
        return [
            DataLoader(
                ds,
                batch_size=self.batch_size,
                # rank r reads items r, r + W, ...: each once, no padding (the data module's evaluation sampler)
                sampler=UnrepeatedDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False),
                num_workers=self.num_workers,
            )
            for ds in (job.dataset for job in self.jobs)
        ]

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.labels is not None and dataloader_idx != self._announced:  # progress: one line per job
            self._announced = dataloader_idx
            _note(f"[{dataloader_idx + 1}/{len(self.jobs)}] {self.labels[dataloader_idx]}")
        images, labels = batch
        job = self.jobs[dataloader_idx]
        if self.model.pos.method != job.method:  # the setter clears the scheme's cache: switch only when needed
            self.model.pos.method = job.method
        logits = self.model(images, pool_mask=job.pool_mask, logit_scale=job.logit_scale)
        hits = (logits.argmax(dim=-1) == labels).sum()
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
    jobs: list[EvalJob | tuple[Dataset, str]],
    trainer: L.Trainer,
    batch_size: int = 256,
    num_workers: int = 0,
    labels: list[str] | None = None,
) -> list[tuple[int, int]]:
    """(correct, seen) summed over all ranks for each job (an EvalJob, or (dataset, method)); the same on every rank.

    ``labels`` (one per job): printed as each job starts, so a long sweep shows its progress."""
    module = TransferEval(model, jobs, batch_size, num_workers, labels)
    default = model.pos.method
    try:
        trainer.test(module, verbose=False)
    except SystemExit:
        if trainer.interrupted:  # Ctrl-C, which Lightning ends with exit(1) and leaves ignored
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt from None
        raise
    finally:
        model.pos.method = default
    counts = module.counts.to(trainer.strategy.root_device)
    counts = trainer.strategy.reduce(counts, reduce_op="sum")  # all_reduce under DDP; identity alone
    return [(int(c), int(n)) for c, n in counts.cpu().tolist()]


# -- the sweep ------------------------------------------------------------------------------------
def _fits(hw: tuple[int, int], trained: tuple[int, int]) -> bool:
    """Whether the canvas regime serves ``hw``: at least the training size, and not equal to it (there the canvas
    is the trained image itself, which zoom already measures)."""
    return hw[0] >= trained[0] and hw[1] >= trained[1] and hw != trained


def check_controls(data: EvalData) -> None:
    """The regimes and controls of ``data``, or one ConfigError line (a Canvas checks its own placement)."""
    if not data.regimes:
        raise ConfigError("no regime given; valid: " + ", ".join(REGIMES))
    for name, values, valid in (("regime", data.regimes, REGIMES), ("pool", (data.pool,), POOLS),
                                ("logit scaling", (data.logit_scaling,), LOGIT_SCALINGS)):  # fmt: skip
        for v in values:
            if v not in valid:
                raise ConfigError(f"unknown {name} '{v}'; valid: {', '.join(valid)}")


def _window(regime: str, resolution: Resolution, trained: tuple[int, int], patch: int, canvas: Canvas) -> Window | None:
    """Where the trained view lies on an evaluation image: None in the zoom regime (the whole image)."""
    if regime == "zoom":
        return None
    try:
        return canvas.window(to_hw(resolution), trained, patch)
    except ValueError as e:
        raise ConfigError(str(e)) from None


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
                         ("interpolation", data.interpolation),
                         ("max_image_pixels", data.max_image_pixels)):  # fmt: skip
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
    from ..checkpoint import model_from_checkpoint
    from ..pretrained import WEIGHT_SUFFIXES, load_pretrained

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
    from ..checkpoint import model_from_checkpoint

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
        from ..pos import POS_REGISTRY

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
    from ..data import build_datamodule

    data = data or EvalData()
    check_controls(data)
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
        patch, trained = plan.model.patch_size, to_hw(cfg.model.img_size)
        cells = [(g, r) for g in data.regimes for r in res if g == "zoom" or _fits(to_hw(r), trained)]
        skipped = [resolution_label(r) for r in res if "canvas" in data.regimes and not _fits(to_hw(r), trained)]
        if skipped:
            _note(f"{plan.path}: canvas serves sizes above the training size; skipped {', '.join(skipped)}")
        windows = {(g, r): _window(g, r, trained, patch, data.canvas) for g, r in cells}
        datasets = {c: dm.eval_dataset(c[1], data.split, windows[c]) for c in cells}
        if data.limit is not None:
            datasets = {c: Subset(ds, range(min(data.limit, len(ds)))) for c, ds in datasets.items()}
        jobs, keys = [], []
        for g, r in cells:
            hw, window = to_hw(r), windows[(g, r)]
            mask = None
            if data.pool == "scene" and window is not None:
                mask = window.token_mask(hw, patch)
            scale = logn_scale(plan.model.grid_for(hw), plan.model.grid) if data.logit_scaling == "logn" else 1.0
            for m in plan.methods:
                jobs.append(EvalJob(datasets[(g, r)], m, mask, scale))
                keys.append((g, r, m))
        labels = [f"{plan.path}: {cfg.model.pos}/{cfg.model.stem} at {resolution_label(r)} px ({g}), method {m}"
                  for g, r, m in keys]  # fmt: skip
        counts = evaluate_model(plan.model, jobs, trainer, cfg.data.batch_size, cfg.data.num_workers, labels)
        for (g, r, m), (correct, seen) in zip(keys, counts, strict=True):
            h, w = to_hw(r)
            window = windows[(g, r)]
            records.append(
                {
                    "checkpoint": str(plan.path),
                    "scheme": cfg.model.pos,
                    "stem": cfg.model.stem,
                    "method": m,
                    "default_method": m == plan.model.pos.methods[0],
                    "regime": g,
                    "window": None if window is None else [window.top, window.left, window.height, window.width],
                    "pool": data.pool,
                    "logit_scaling": data.logit_scaling,
                    "resolution": h if h == w else resolution_label(r),
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
