"""A training run: output folder, Trainer, fit, test, and the optional resolution sweep.

With ``--train-resolutions R1 R2 ...`` each training batch is at one of those resolutions, the
same on every rank at the same step (``vitpos.data.base.MultiResBatchSampler``); validation,
test and the best-checkpoint choice stay at ``img_size``.

The folder ``OUT`` holds ``config.yaml`` (the resolved config), ``checkpoints/last.ckpt`` and
``checkpoints/best-*.ckpt``, ``logs/`` (CSV), ``tb/`` (TensorBoard) and ``results.json``.
"""

from __future__ import annotations

import copy
import csv
import errno
import fcntl
import io
import json
import os
import platform
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_warn

from .checkpoint import AtomicCheckpointIO, config_from_checkpoint, load_checkpoint
from .cli import build_parser, config_from_args, quiet_logs
from .config import Config, walk
from .data import build_datamodule
from .errors import ConfigError
from .lit import LitViT

_OUT_ENV = "VITPOS_RUN_OUT"  # hands the chosen run folder to the processes Lightning's DDP launcher starts
LOCK = ".lock"  # held (lockf) by the training process for the run's life
# What a start writes before its first checkpoint: a folder holding only these (and no checkpoint)
# is an unfinished start, cleared by the next one.
START_ARTEFACTS = ("config.yaml", "logs", "tb", "checkpoints")


class RunInterrupted(Exception):
    """Ctrl-C during training; the message says what was kept and how to go on."""


def env_rank() -> int:
    """This process's global rank as the launcher (torchrun, SLURM, Lightning) set it; 0 when alone."""
    # Not Lightning's rank_zero_only.rank: that prefers LOCAL_RANK to SLURM_PROCID, and this rank decides the
    # run folder before any Trainer exists to correct it.
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return int(os.environ.get("LOCAL_RANK", 0))  # Lightning's own launcher, one node


# -- the run folder ---------------------------------------------------------------------------------------------
class RunLock:
    """An exclusive lock on ``OUT/.lock`` for the life of a run: a second run on the same folder is refused.

    A POSIX record lock (lockf), not flock: a flock is shared with every process forked while it is held
    (data loader workers), which outlive a killed run for a while and would keep it locked. The kernel
    drops a record lock when its process ends, however it ends (SIGKILL included)."""

    _held: dict[Path, RunLock] = {}

    def __init__(self, out: Path):
        self.path = out / LOCK
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise ConfigError(
                f"{out} is in use by another training run (pid {holder}); wait for it to end or choose another --out"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        RunLock._held[out] = self

    def release(self, remove: bool = False) -> None:
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        RunLock._held = {k: v for k, v in RunLock._held.items() if v is not self}


def release_lock(out: Path, remove: bool = False) -> None:
    lock = RunLock._held.get(out)
    if lock is not None:
        lock.release(remove)


def _entries(out: Path) -> list[Path]:
    return [p for p in out.iterdir() if p.name != LOCK]


def has_checkpoint(out: Path) -> bool:
    ckpts = out / "checkpoints"
    return ckpts.is_dir() and any(p.suffix == ".ckpt" for p in ckpts.iterdir())


def unfinished_start(out: Path) -> bool:
    """``out`` holds only what a start writes before its first checkpoint, and no checkpoint."""
    entries = _entries(out)
    return bool(entries) and all(p.name in START_ARTEFACTS for p in entries) and not has_checkpoint(out)


def clear_start(out: Path) -> None:
    """Remove what a start wrote (config, logs, an empty checkpoints folder); nothing else is touched."""
    for name in START_ARTEFACTS:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def resolve_out(cfg: Config) -> Path:
    """Choose the run folder, take its lock, and make sure no earlier run is overwritten silently."""
    t = cfg.trainer
    if env_rank() > 0 and os.environ.get(_OUT_ENV):  # a process the launcher started: same folder as rank 0
        return Path(os.environ[_OUT_ENV])
    if t.out is None:
        if t.resume:
            raise ConfigError("--resume needs --out pointing at the run to continue")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        data = re.sub(r"[^\w.-]+", "_", cfg.data.name).strip("_")  # hf:PATH -> hf_PATH: one folder
        out = Path("runs") / f"{data}-{cfg.model.pos}-{cfg.model.stem}-{stamp}"
    else:
        out = Path(t.out)
    if env_rank() == 0 and not t.fast_dev_run:
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is a file, not a folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create --out {out}: {e.strerror}") from None
        if not os.access(out, os.W_OK | os.X_OK):
            raise ConfigError(f"--out {out} is not writable")
        RunLock(out)
        last = out / "checkpoints" / "last.ckpt"
        if t.resume and not last.is_file():
            if not unfinished_start(out):
                release_lock(out)
                raise ConfigError(f"nothing to resume: {last} does not exist")
            clear_start(out)
            t.resume = False
            print(f"train.py: {out} holds a start that never reached a checkpoint; starting it afresh", file=sys.stderr)
        elif not t.resume and _entries(out):
            if unfinished_start(out):
                clear_start(out)
                print(f"train.py: cleared an unfinished start (no checkpoint) in {out}", file=sys.stderr)
            elif not t.overwrite:
                release_lock(out)
                raise ConfigError(
                    f"{out} already holds a run; pass --resume to continue it, --overwrite to move it aside, "
                    "or choose another --out"
                )
            else:
                aside = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
                aside.mkdir()
                for p in _entries(out):
                    p.rename(aside / p.name)
                print(f"moved the earlier run in {out} to {aside}", file=sys.stderr)
    os.environ[_OUT_ENV] = str(out)
    return out


# -- comparing a resumed run's config --------------------------------------------------------------------------
def config_changes(saved: Config, requested: Config) -> list[str]:
    """'section.field (old -> new)' for every field that differs and may not change on resume."""
    changes = []
    for (name, a_section, f), (_, b_section, _) in zip(walk(saved), walk(requested), strict=True):
        a, b = getattr(a_section, f.name), getattr(b_section, f.name)
        if a != b and not f.metadata.get("resumable"):
            changes.append(f"{name}.{f.name} ({a!r} -> {b!r})")
    return changes


def resolve_config(args) -> Config:
    """The config of the run to start, or of the run to resume (the checkpoint's, checked against the flags)."""
    given = vars(args)
    out = given.get("out")
    if not (given.get("resume") and out):
        return config_from_args(args)
    last = Path(out) / "checkpoints" / "last.ckpt"
    if last.is_file():
        saved = config_from_checkpoint(load_checkpoint(last))
        requested = config_from_args(args, base=copy.deepcopy(saved))
        changes = config_changes(saved, requested)
        if changes:
            raise ConfigError(
                f"cannot resume {out}: the run was trained with other settings: {'; '.join(changes)}; "
                "resume without changing them, or start a new run in another --out"
            )
        return requested
    started = Path(out) / "config.yaml"
    if started.is_file() and unfinished_start(Path(out)):  # a start that never checkpointed: its own config
        return config_from_args(args, base=Config.from_yaml(started))
    return config_from_args(args)


# -- logging and time ------------------------------------------------------------------------------------------
class _KeepHistoryWriter(ExperimentWriter):
    """Lightning's CSV writer, except that a resumed run keeps the rows logged before its checkpoint, and that
    no kill can leave the file half-written: Lightning rewrites ``metrics.csv`` in place (truncate, then write)
    whenever a new metric name appears, which a SIGKILL in between turned into an empty history.

    ``epoch_summary`` is the checkpoint's :class:`EpochSummary` entry: written back, once, where the file lacks it."""

    def __init__(self, log_dir: str, resume_step: int | None, epoch_summary: dict | None = None):
        self.resume_step, self.epoch_summary = resume_step, epoch_summary
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if self.resume_step is None or not path.is_file():
            return super()._check_log_dir_exists()
        text = path.read_text()
        if not text.endswith("\n"):  # a kill during an append: the torn last row is dropped
            text = text[: text.rfind("\n") + 1]
        reader = csv.DictReader(io.StringIO(text, newline=""))
        keys = list(reader.fieldnames or [])
        # Rows logged after the checkpoint (a run killed mid-epoch) are logged again by the resumed run.
        rows = [r for r in reader if r.get("step") not in (None, "") and int(float(r["step"])) < self.resume_step]
        _write_csv(path, keys, rows)
        self.metrics_keys = keys
        summary = self.epoch_summary
        if summary and not any(_is_summary_row(r, summary) for r in rows):
            # the run was killed between the checkpoint and Lightning's summary row: the row as Lightning logs it
            self.log_metrics({**summary["metrics"], "epoch": summary["epoch"]}, step=summary["step"])
            self.save()

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        path = Path(self.metrics_file_path)
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        _write_csv(path, fieldnames, rows)


def _is_summary_row(row: dict[str, str], summary: dict) -> bool:
    step = row.get("step") or ""
    return step != "" and int(float(step)) == summary["step"] and all(row.get(k) for k in summary["metrics"])


def _write_csv(path: Path, keys: list[str], rows: list[dict]) -> None:
    """Write ``path`` whole or not at all (a temp file renamed into place)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


class HistoryCSVLogger(CSVLogger):
    """CSV logs that survive a resume: one ``metrics.csv`` holds the rows from before and after it."""

    def __init__(self, *args, resume_step: int | None = None, epoch_summary: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.resume_step, self.epoch_summary = resume_step, epoch_summary

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepHistoryWriter(self.log_dir, self.resume_step, self.epoch_summary)
        return self._experiment


class EpochSummary(Callback):
    """Keeps an epoch's training summary row (``train/loss_epoch``, ``train/top1``, ...) in the checkpoint
    written at the end of that epoch.

    Lightning logs that row only after the epoch's checkpoint is written, and a run resumed from the checkpoint
    does not log it again, so a kill in between would lose it for good; the resumed run's CSV logger writes it
    back from here (``checkpoint["epoch_summary"]``) when ``metrics.csv`` lacks it."""

    KEY = "epoch_summary"

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        loop = trainer.fit_loop.epoch_loop
        if not loop._num_ready_batches_reached():  # mid-epoch: the summary is not known yet
            return
        # The training results, also while validation is the active loop. Every rank saves, so a metric that
        # syncs across ranks (torchmetrics) syncs here as it would at the epoch's end, which then reuses the value.
        logged = loop._results.metrics(on_step=False)["log"]
        if logged:
            checkpoint[self.KEY] = {
                "epoch": trainer.current_epoch,
                # the step Lightning logs the row at: the epoch's last optimizer step, counted from 0
                "step": trainer.global_step - 1,
                "metrics": {k: float(v) for k, v in logged.items()},
            }


class PartialEpoch(Callback):
    """Carries the training aggregates of an unfinished epoch across a mid-epoch checkpoint, so that a run resumed from
    it logs that epoch's summary row (``train/loss_epoch``, ``train/top1``, ...) over the whole epoch, not over the
    steps after the resume.

    ``checkpoint["epoch_partial"]`` holds, for every rank (every rank saves, and the values are gathered), what the
    epoch's ``self.log(..., on_epoch=True)`` calls have accumulated: the weighted sum and count behind a logged
    tensor's epoch mean (or its sum), and the states of a logged torchmetrics object. Each rank takes back its own:
    under DDP a tensor's epoch value is its own rank's (unless logged with ``sync_dist``) and a torchmetrics object
    syncs its states at the epoch's end, as in an uninterrupted run. A checkpoint without the entry resumes with the
    epoch's aggregates empty."""

    KEY = "epoch_partial"

    def __init__(self) -> None:
        self.pending: dict | None = None  # this rank's part of the checkpoint's entry, until restored

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        loop = trainer.fit_loop.epoch_loop
        if loop.batch_progress.current.ready == 0 or loop._num_ready_batches_reached():
            return  # not inside an epoch: nothing is half-accumulated (an epoch's end is EpochSummary's)
        sums, metrics = {}, {}
        for key, entry in sorted(loop._results.items()):  # the same order on every rank: each gather is collective
            if not entry.meta.on_epoch:
                continue
            if entry.is_tensor and entry.meta.is_mean_reduction:
                sums[key] = {n: _gather(pl_module, getattr(entry, n)) for n in ("value", "cumulated_batch_size")}
            elif entry.is_tensor and entry.meta.is_sum_reduction:
                sums[key] = {"value": _gather(pl_module, entry.value)}
            elif not entry.is_tensor and entry.meta.metric_attribute:
                states = entry.value.metric_state
                metrics[entry.meta.metric_attribute] = {n: _gather(pl_module, v) for n, v in states.items()}
        checkpoint[self.KEY] = {"world_size": trainer.world_size, "sums": sums, "metrics": metrics}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        saved = checkpoint.get(self.KEY)
        if saved is None:
            return
        if saved["world_size"] != trainer.world_size:
            rank_zero_warn(
                f"the checkpoint's unfinished epoch was trained on {saved['world_size']} rank(s), this run has "
                f"{trainer.world_size}: that epoch's summary row covers the steps after the resume only"
            )
            return
        rank = trainer.global_rank
        self.pending = {
            part: {key: {n: v[rank] for n, v in values.items()} for key, values in saved[part].items()}
            for part in ("sums", "metrics")
        }

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.pending is None:
            return
        for attribute, states in self.pending["metrics"].items():  # the module's own objects, before any update
            metric = pl_module.get_submodule(attribute)
            for name, value in states.items():
                setattr(metric, name, value.to(getattr(metric, name).device))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.pending is None:
            return
        # Lightning creates a logged tensor's accumulator at its first self.log: now, after the first resumed batch,
        # each holds that batch alone, and the checkpoint's part of the epoch is added to it.
        results = trainer.fit_loop.epoch_loop._results
        for key, saved in self.pending["sums"].items():
            if key in results:
                entry = results[key]
                for name, value in saved.items():
                    setattr(entry, name, getattr(entry, name) + value.to(entry.value.device))
        self.pending = None


def _gather(pl_module: L.LightningModule, value: torch.Tensor) -> torch.Tensor:
    """``value`` of every rank, stacked on a first dimension (world_size, ...), on the CPU."""
    gathered = pl_module.all_gather(value.detach())
    return (gathered if pl_module.trainer.world_size > 1 else gathered.unsqueeze(0)).cpu()


class TrainClock(Callback):
    """Training wall time, carried in the checkpoint so that a resumed run reports the sum over its parts."""

    def __init__(self) -> None:
        self.before, self.start = 0.0, None

    def seconds(self) -> float:
        return self.before + (time.perf_counter() - self.start if self.start is not None else 0.0)

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        self.before, self.start = self.seconds(), None

    def state_dict(self) -> dict[str, float]:
        return {"seconds": self.seconds()}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.before = float(state_dict.get("seconds", 0.0))


def build_trainer(
    cfg: Config, out: Path, resume_step: int | None = None, epoch_summary: dict | None = None
) -> L.Trainer:
    t = cfg.trainer
    ckpt_dir = out / "checkpoints"
    # Lightning's save_last only writes when a top-k file was written, so `last.ckpt` gets its own
    # callbacks: every epoch, and every N steps if asked. The best-by-val checkpoint comes first so
    # that `trainer.checkpoint_callback` is it.
    callbacks = [
        ModelCheckpoint(
            dirpath=ckpt_dir,
            filename="best-epoch{epoch:03d}",
            auto_insert_metric_name=False,
            monitor="val/top1",
            mode="max",
            save_top_k=1,
        ),
        ModelCheckpoint(dirpath=ckpt_dir, filename="last", enable_version_counter=False),
        LearningRateMonitor(logging_interval="step"),
        TrainClock(),
        EpochSummary(),
        PartialEpoch(),
    ]
    if t.ckpt_every_n_steps:
        callbacks.append(
            ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                enable_version_counter=False,
                every_n_train_steps=t.ckpt_every_n_steps,
            )
        )
    if t.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--accelerator {t.accelerator}: no CUDA GPU is available here; use --accelerator cpu")
    if t.accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--accelerator mps: MPS is not available here; use --accelerator cpu")
    # flushed at every log call, so that a killed run loses no row written before its checkpoint
    csv_logger = HistoryCSVLogger(
        out, name="logs", version="", resume_step=resume_step, epoch_summary=epoch_summary, flush_logs_every_n_steps=1
    )
    try:
        return L.Trainer(
            accelerator=t.accelerator,
            devices=t.devices,
            num_nodes=t.num_nodes,
            strategy=t.strategy,
            precision=t.precision,
            max_epochs=cfg.optim.epochs,
            gradient_clip_val=cfg.optim.grad_clip or None,
            default_root_dir=out,
            logger=[csv_logger, TensorBoardLogger(out, name="tb", version="")],
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO()],
            fast_dev_run=t.fast_dev_run,
            log_every_n_steps=t.log_every_n_steps,
            enable_model_summary=False,
            # On resume the sanity-check pass would draw from the RNG just restored and shift every later shuffle.
            num_sanity_val_steps=0 if t.resume else 2,
        )
    except MisconfigurationException as e:  # e.g. more devices than the machine has
        raise ConfigError(f"the trainer refused the settings: {str(e).splitlines()[0]}") from None


def _clock(trainer: L.Trainer) -> TrainClock:
    return next(c for c in trainer.callbacks if isinstance(c, TrainClock))


def cpu_name() -> str:
    """The processor's model name (Linux), else what ``platform`` knows."""
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def hardware(trainer: L.Trainer) -> str:
    """What a run trained on, kept in results.json so that its seconds can be read: devices x accelerator."""
    device = trainer.strategy.root_device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return f"{trainer.world_size} x {name}"


# -- the run ---------------------------------------------------------------------------------------------------
def run(cfg: Config) -> dict:
    """Train (or resume) the run ``cfg`` describes; return its results (also written to results.json)."""
    pre = None
    if cfg.model.init_from and not cfg.trainer.resume:  # a resumed run continues from its own checkpoint
        from .pretrained import apply_architecture, load_pretrained

        pre = load_pretrained(cfg.model.init_from, cfg.model.init_arch)
        apply_architecture(cfg.model, pre)  # the weights' architecture, at this run's img_size
        if pre.data_config and cfg.data.mean is None:  # the normalisation the weights were trained with
            cfg.data.mean, cfg.data.std = list(pre.data_config["mean"]), list(pre.data_config["std"])
    out = resolve_out(cfg)
    fresh = not cfg.trainer.resume and not cfg.trainer.fast_dev_run and env_rank() == 0
    try:
        return _run(cfg, out, pre)
    except BaseException:
        # A fresh start that ends before it trained a step leaves nothing behind to block the next start.
        if fresh and out.is_dir() and _nothing_trained(out):
            clear_start(out)
        raise
    finally:
        try:
            if out.is_dir():
                empty = not _entries(out)
                release_lock(out, remove=empty)
                if empty and not any(out.iterdir()):
                    out.rmdir()
        except FileNotFoundError:
            pass  # under DDP rank 0 may clear a run that trained nothing while another rank is here


def _nothing_trained(out: Path) -> bool:
    last = out / "checkpoints" / "last.ckpt"
    if not has_checkpoint(out):
        return True
    try:
        return not last.is_file() or int(load_checkpoint(last).get("global_step", 0)) == 0
    except ConfigError:
        return False


def _run(cfg: Config, out: Path, pre=None) -> dict:
    ckpt_path, resume_step, epoch_summary = None, None, None
    if cfg.trainer.resume:
        ckpt_path = out / "checkpoints" / "last.ckpt"
        ckpt = load_checkpoint(ckpt_path)  # a corrupt file fails here, in one line
        resume_step, epoch_summary = int(ckpt.get("global_step", 0)), ckpt.get(EpochSummary.KEY)
        del ckpt  # its weights: Lightning's restore loads its own copy
    L.seed_everything(cfg.trainer.seed, workers=True, verbose=False)
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    dm.train_resolutions = list(cfg.trainer.train_resolutions)  # one resolution per batch; see vitpos.data.base
    if pre is not None and cfg.model.in_chans != dm.in_chans:
        raise ConfigError(
            f"{pre.spec} takes {cfg.model.in_chans} input channel(s); data '{cfg.data.name}' has {dm.in_chans}"
        )
    if cfg.data.verify_images and env_rank() == 0:
        verify_images(dm)
    cfg.model.num_classes, cfg.model.in_chans = dm.num_classes, dm.in_chans
    lit = LitViT(cfg.to_dict())
    if pre is not None:
        from .pretrained import carry

        for note in [f"initialised from {pre.spec} (trained at {pre.img_size} px)", *carry(pre.model, lit.model)]:
            if env_rank() == 0:
                print(f"vitpos: {note}", flush=True)
    if cfg.trainer.compile:
        lit.model.compile()
    trainer = build_trainer(cfg, out, resume_step, epoch_summary)
    if trainer.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        if not cfg.trainer.fast_dev_run and not cfg.trainer.resume:
            cfg.save_yaml(out / "config.yaml")
        world = trainer.world_size
        scaled = "scaled linearly (x global/256)" if cfg.optim.lr_scaling == "linear" else "not scaled with the batch"
        print(
            f"vitpos: pos={cfg.model.pos} stem={cfg.model.stem} data={cfg.data.name} img={cfg.model.img_size} "
            f"params={sum(p.numel() for p in lit.model.parameters()) / 1e6:.2f}M out={out}\n"
            f"vitpos: global batch = {cfg.data.batch_size} per device x {trainer.num_devices} devices x "
            f"{trainer.num_nodes} nodes = {cfg.data.batch_size * world}; lr {cfg.optim.lr:g} {scaled}",
            flush=True,
        )
    try:
        trainer.fit(lit, datamodule=dm, ckpt_path=ckpt_path, weights_only=True)
    except SystemExit:
        if trainer.interrupted:  # Lightning turns Ctrl-C into exit(1) after its own shutdown
            signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning leaves Ctrl-C ignored
            raise KeyboardInterrupt from None
        raise
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise
    train_seconds = _clock(trainer).seconds()
    results: dict = {"out": str(out), "train_seconds": round(train_seconds, 1), "hardware": hardware(trainer)}
    if cfg.trainer.fast_dev_run:
        return results
    if trainer.global_step == 0:
        raise ConfigError(
            f"trained zero steps: the training set gives no full batch of {cfg.data.batch_size} images per device on "
            f"{trainer.world_size} device(s); lower --batch-size, use fewer devices or more training images"
        )
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    # what the model fitted: the last epoch's running training top-1 and loss (beside val, the gap); read before
    # trainer.test replaces the metrics
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items() if k in ("train/top1", "train/loss_epoch")}
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    tested = trainer.test(lit, datamodule=dm, ckpt_path=best or None, weights_only=True, verbose=False)
    results.update(
        {
            "pos": cfg.model.pos,
            "stem": cfg.model.stem,
            "data": cfg.data.name,
            "epochs": cfg.optim.epochs,
            "global_step": trainer.global_step,
            "ema": cfg.optim.ema,
            "last_val": val,
            "last_train": fitted,
            "best_val_top1": float(trainer.checkpoint_callback.best_model_score or float("nan")),
            "best_checkpoint": best,
            "test": {k: float(v) for k, v in (tested[0] if tested else {}).items()},
        }
    )
    if trainer.is_global_zero:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print(summary(results, out, cfg), flush=True)
    if cfg.trainer.eval_resolutions:
        from .evaluate import sweep_and_write

        sweep_and_write(
            [out / "checkpoints" / "last.ckpt"],
            resolutions=cfg.trainer.eval_resolutions,
            out_dir=out / "resolution",
            trainer_kwargs={"accelerator": cfg.trainer.accelerator, "devices": cfg.trainer.devices,
                            "strategy": cfg.trainer.strategy, "num_nodes": cfg.trainer.num_nodes},
            overwrite=cfg.trainer.resume,  # a resumed run re-sweeps its own final checkpoint
        )  # fmt: skip
    return results


def summary(results: dict, out: Path, cfg: Config) -> str:
    """The end-of-run lines: scores, where the checkpoints are, and the command to run next."""
    last = out / "checkpoints" / "last.ckpt"
    weights = " (EMA weights)" if cfg.optim.ema else ""
    img, patch = cfg.model.img_size, cfg.model.patch_size
    resolutions = sorted({img, img * 3 // 2 // patch * patch, 2 * img})
    next_cmd = f"python -m vitpos.evaluate --ckpt {last} --resolutions {' '.join(map(str, resolutions))}"
    return (
        f"vitpos: done in {results['train_seconds']:.0f}s of training; best val top-1 {results['best_val_top1']:.4f}, "
        f"test top-1 {results['test'].get('test/top1', float('nan')):.4f}{weights}\n"
        f"vitpos: checkpoints {last} (last), {results['best_checkpoint'] or '-'} (best); "
        f"results {out / 'results.json'}\n"
        f"vitpos: next: {next_cmd}"
    )


def verify_images(dm) -> None:
    """Decode every image of every split the data module reads; one line listing the bad files, if any."""
    bad = dm.verify_images() if hasattr(dm, "verify_images") else []
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ConfigError(f"{len(bad)} image(s) cannot be decoded: {shown}; fix or remove them")
    print(f"vitpos: --verify-images: every image of {dm.name} decodes", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``train.py``: a bad input ends in one line on stderr and exit status 2."""
    args = build_parser().parse_args(argv)
    quiet_logs()
    # Under DDP every rank meets the same bad input; rank 0 alone says so.
    say = print if env_rank() == 0 else (lambda *a, **k: None)
    try:
        run(resolve_config(args))
    except ConfigError as e:
        say(f"train.py: error: {e}", file=sys.stderr)
        return 2
    except FloatingPointError as e:
        say(f"train.py: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        say(interrupted_message(getattr(args, "out", None) or os.environ.get(_OUT_ENV)), file=sys.stderr)
        return 130
    return 0


def interrupted_message(out: str | None) -> str:
    last = Path(out) / "checkpoints" / "last.ckpt" if out else None
    if last is not None and last.is_file():
        return (
            f"train.py: interrupted; last checkpoint kept ({last}); resume with: python train.py --resume --out {out}"
        )
    return "train.py: interrupted before the first checkpoint; nothing was kept"
