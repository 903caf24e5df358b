"""A training run: the Trainer, fit, test, the summary and the optional resolution sweep.

With ``--train-resolutions R1 R2 ...`` each training batch is at one of those resolutions, the
same on every rank at the same step (``vitpos.data.base.MultiResBatchSampler``); validation,
test and the best-checkpoint choice stay at ``img_size``.

The folder ``OUT`` (vitpos.rundir) holds ``config.yaml`` (the resolved config), ``checkpoints/last.ckpt`` and
``checkpoints/best-*.ckpt``, ``logs/`` (CSV), ``tb/`` (TensorBoard) and ``results.json``. A killed run resumed with
``--resume`` continues from ``last.ckpt`` and writes what the uninterrupted run would have written.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, Timer
from lightning.pytorch.loggers import TensorBoardLogger

from .checkpoint import AtomicCheckpointIO, config_from_checkpoint, load_checkpoint
from .cli import asked_fields, build_parser, config_from_args, device_error, quiet_logs
from .compat.lightning import EpochSummary, HistoryCSVLogger, PartialEpoch
from .config import Config
from .data import build_datamodule
from .errors import ConfigError
from .lit import LitViT
from .outputs import shell, write_failed
from .rundir import (
    OUT_ENV,
    RUN_CONFIG_HEADER,
    clear_start,
    close,
    config_changes,
    env_rank,
    has_checkpoint,
    interrupted_message,
    kept_message,
    last_checkpoint,
    resolve_out,
    unfinished_start,
)


def resolve_config(args: Any) -> tuple[Config, dict[str, Any] | None]:
    """The config of the run to start, or of the run to resume (the checkpoint's, checked against the flags) with
    the checkpoint it resumes from, read once here."""
    given = vars(args)
    out = given.get("out")
    if not (given.get("resume") and out):
        return config_from_args(args), None
    last = last_checkpoint(out)
    if last.is_file():
        ckpt = load_checkpoint(last)  # a corrupt file fails here, in one line
        saved = config_from_checkpoint(ckpt)
        requested = config_from_args(args, base=copy.deepcopy(saved))
        changes = config_changes(saved, requested)
        if changes:
            raise ConfigError(
                f"cannot resume {out}: the run was trained with other settings: {'; '.join(changes)}; "
                "resume without changing them, or start a new run in another --out"
            )
        return requested, ckpt
    started = Path(out) / "config.yaml"
    if started.is_file() and unfinished_start(Path(out)):  # a start that never checkpointed: its own config
        return config_from_args(args, base=Config.from_yaml(started)), None
    return config_from_args(args), None


def build_trainer(cfg: Config, out: Path, resumed: dict[str, Any] | None = None) -> L.Trainer:
    """The run's Trainer; ``resumed`` is the checkpoint it continues (its CSV history picks up from there)."""
    t = cfg.trainer
    ckpt_dir = out / "checkpoints"
    # Lightning's save_last only writes when a top-k file was written, so `last.ckpt` gets its own
    # callbacks: every epoch, and every N steps if asked. The best-by-val checkpoint comes first so
    # that `trainer.checkpoint_callback` is it.
    best = ModelCheckpoint(dirpath=ckpt_dir, filename="best-epoch{epoch:03d}", auto_insert_metric_name=False,
                           monitor="val/top1", mode="max", save_top_k=1)  # fmt: skip
    callbacks = [best, ModelCheckpoint(dirpath=ckpt_dir, filename="last", enable_version_counter=False),
                 LearningRateMonitor(logging_interval="step"), Timer(), EpochSummary(), PartialEpoch()]  # fmt: skip
    if t.ckpt_every_n_steps:
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename="last", enable_version_counter=False,
                                         every_n_train_steps=t.ckpt_every_n_steps))  # fmt: skip
    error = device_error(t.accelerator)
    if error:
        raise ConfigError(error)
    resume_step = int(resumed.get("global_step", 0)) if resumed is not None else None
    # flushed at every log call, so that a killed run loses no row written before its checkpoint
    csv_logger = HistoryCSVLogger(out, name="logs", version="", resume_step=resume_step, flush_logs_every_n_steps=1,
                                  epoch_summary=(resumed or {}).get(EpochSummary.KEY))  # fmt: skip
    io = AtomicCheckpointIO({last_checkpoint(out): resumed} if resumed is not None else None)
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
            plugins=[io],
            fast_dev_run=t.fast_dev_run,
            log_every_n_steps=t.log_every_n_steps,
            enable_model_summary=False,
            # the data module gives every loader its per-rank sampler (vitpos.data.base)
            use_distributed_sampler=False,
            # On resume the sanity-check pass would draw from the RNG just restored and shift every later shuffle.
            num_sanity_val_steps=0 if t.resume else 2,
        )
    except MisconfigurationException as e:  # e.g. more devices than the machine has
        raise ConfigError(f"the trainer refused the settings: {str(e).splitlines()[0]}") from None


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


def run(cfg: Config, resumed: dict[str, Any] | None = None, asked: set[str] | None = None) -> dict:
    """Train the run ``cfg`` describes, or resume it from ``resumed`` (its ``last.ckpt``, read by the caller; read
    here when not given); return its results (also written to results.json).

    ``asked``: the config fields the user set (:func:`vitpos.cli.asked_fields`), which ``--init-from`` weights may not
    contradict (default: those away from their defaults)."""
    pre = None
    if cfg.model.init_from and not cfg.trainer.resume:  # a resumed run continues from its own checkpoint
        from .pretrained import apply_architecture, load_pretrained

        pre = load_pretrained(cfg.model.init_from, cfg.model.init_arch)
        apply_architecture(cfg.model, pre, asked)  # the weights' architecture, at this run's img_size
        if pre.data_config and cfg.data.mean is None:  # the normalisation the weights were trained with
            cfg.data.mean, cfg.data.std = list(pre.data_config["mean"]), list(pre.data_config["std"])
    out = resolve_out(cfg)
    fresh = not cfg.trainer.resume and not cfg.trainer.fast_dev_run and env_rank() == 0
    try:
        if cfg.trainer.resume and resumed is None:
            resumed = load_checkpoint(last_checkpoint(out))
        return _run(cfg, out, pre, resumed if cfg.trainer.resume else None)
    except BaseException:
        # A fresh start that ends before it trained a step leaves nothing behind to block the next start.
        if fresh and out.is_dir() and _nothing_trained(out):
            clear_start(out)
        raise
    finally:
        close(out)


def _nothing_trained(out: Path) -> bool:
    last = last_checkpoint(out)
    if not has_checkpoint(out):
        return True
    try:
        return not last.is_file() or int(load_checkpoint(last).get("global_step", 0)) == 0
    except ConfigError:
        return False


def _run(cfg: Config, out: Path, pre: Any, resumed: dict[str, Any] | None) -> dict:
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
        from .pretrained import transfer_weights

        notes = transfer_weights(pre.model, lit.model)
        for note in [f"initialised from {pre.spec} (trained at {pre.img_size} px)", *notes] if env_rank() == 0 else []:
            print(f"vitpos: {note}", flush=True)
    if cfg.trainer.compile:
        lit.model.compile()
    trainer = build_trainer(cfg, out, resumed)
    del resumed  # Lightning's restore takes it from the checkpoint IO, once
    if trainer.is_global_zero:
        if not cfg.trainer.fast_dev_run and not cfg.trainer.resume:
            cfg.save_yaml(out / "config.yaml", header=RUN_CONFIG_HEADER)
        world = trainer.world_size
        scaled = "scaled linearly (x global/256)" if cfg.optim.lr_scaling == "linear" else "not scaled with the batch"
        print(
            f"vitpos: pos={cfg.model.pos} stem={cfg.model.stem} data={cfg.data.name} img={cfg.model.img_size} "
            f"params={sum(p.numel() for p in lit.model.parameters()) / 1e6:.2f}M "
            f"out={shell(out) if not cfg.trainer.fast_dev_run else '- (--fast-dev-run writes nothing)'}\n"
            f"vitpos: global batch = {cfg.data.batch_size} per device x {trainer.num_devices} devices x "
            f"{trainer.num_nodes} nodes = {cfg.data.batch_size * world}; lr {cfg.optim.lr:g} {scaled}",
            flush=True,
        )
    ckpt_path = last_checkpoint(out) if cfg.trainer.resume else None
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
    timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
    # the threads too: on a CPU they set the order of floating-point sums, so a run reproduces only at the same count
    results: dict = {"out": str(out), "train_seconds": round(timer.time_elapsed("train"), 1),
                     "hardware": hardware(trainer), "threads": torch.get_num_threads()}  # fmt: skip
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
    tested = trainer.test(lit, datamodule=dm, ckpt_path=best or None, weights_only=True, verbose=False) or [{}]
    results.update(pos=cfg.model.pos, stem=cfg.model.stem, data=cfg.data.name, epochs=cfg.optim.epochs,
                   global_step=trainer.global_step, ema=cfg.optim.ema, last_val=val, last_train=fitted,
                   best_val_top1=float(trainer.checkpoint_callback.best_model_score or float("nan")),
                   best_checkpoint=best, test={k: float(v) for k, v in tested[0].items()})  # fmt: skip
    if trainer.is_global_zero:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print(summary(results, out, cfg), flush=True)
    if cfg.trainer.eval_resolutions:
        from .evaluate import sweep_and_write

        sweep_and_write(
            [last_checkpoint(out)],
            resolutions=cfg.trainer.eval_resolutions,
            out_dir=out / "resolution",
            trainer_kwargs={"accelerator": cfg.trainer.accelerator, "devices": cfg.trainer.devices,
                            "strategy": cfg.trainer.strategy, "num_nodes": cfg.trainer.num_nodes},
            overwrite=cfg.trainer.resume,  # a resumed run re-sweeps its own final checkpoint
        )  # fmt: skip
    return results


def summary(results: dict, out: Path, cfg: Config) -> str:
    """The end-of-run lines: scores, where the checkpoints are, and the command to run next (runnable as printed)."""
    last = last_checkpoint(out)
    best = last.parent / Path(results["best_checkpoint"]).name if results["best_checkpoint"] else None
    weights = " (EMA weights)" if cfg.optim.ema else ""
    img, patch = cfg.model.img_size, cfg.model.patch_size
    resolutions = sorted({img, img * 3 // 2 // patch * patch, 2 * img})
    if cfg.trainer.eval_resolutions:  # the sweep writes RUN/resolution/: the evaluator's default folder is taken
        next_cmd = shell("python", "-m", "vitpos.diagnose", "--ckpt", last)
    else:
        next_cmd = shell("python", "-m", "vitpos.evaluate", "--ckpt", last, "--resolutions", *resolutions)
    return (
        f"vitpos: done in {results['train_seconds']:.0f}s of training; best val top-1 {results['best_val_top1']:.4f}, "
        f"test top-1 {results['test'].get('test/top1', float('nan')):.4f}{weights}\n"
        f"vitpos: checkpoints {shell(last)} (last), {shell(best) if best else '-'} (best); "
        f"results {shell(out / 'results.json')}\n"
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
        run(*resolve_config(args), asked=asked_fields(args))
    except ConfigError as e:
        say(f"train.py: error: {e}", file=sys.stderr)
        return 2
    except FloatingPointError as e:
        say(f"train.py: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        say(interrupted_message(getattr(args, "out", None) or os.environ.get(OUT_ENV)), file=sys.stderr)
        return 130
    except OSError as e:  # a write that failed (a full disk, a quota): what was kept, and how to go on
        out = getattr(args, "out", None) or os.environ.get(OUT_ENV)
        say(f"train.py: error: {write_failed(e, e.filename or out or '?', kept_message(out))}", file=sys.stderr)
        return 2
    return 0
