"""A training run: output folder, Trainer, fit, test, and the optional resolution sweep.

With ``--train-resolutions R1 R2 ...`` each training batch is at one of those resolutions, the
same on every rank at the same step (``vitpos.data.base.MultiResBatchSampler``); validation,
test and the best-checkpoint choice stay at ``img_size``.

The folder ``OUT`` holds ``config.yaml`` (the resolved config), ``checkpoints/last.ckpt`` and
``checkpoints/best-*.ckpt``, ``logs/`` (CSV), ``tb/`` (TensorBoard) and ``results.json``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from .checkpoint import AtomicCheckpointIO, config_from_checkpoint, load_checkpoint
from .cli import build_parser, config_from_args
from .config import Config, ConfigError
from .data import build_datamodule
from .lit import LitViT

_OUT_ENV = "VITPOS_RUN_OUT"  # hands the chosen run folder to the processes Lightning's DDP launcher starts


def env_rank() -> int:
    """This process's global rank as the launcher (torchrun, SLURM, Lightning) set it; 0 when alone."""
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return int(os.environ.get("LOCAL_RANK", 0))  # Lightning's own launcher, one node


def resolve_out(cfg: Config) -> Path:
    """Choose the run folder and make sure no earlier run is overwritten silently."""
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
        has_run = out.exists() and any(out.iterdir())
        if t.resume:
            if not (out / "checkpoints" / "last.ckpt").is_file():
                raise ConfigError(f"nothing to resume: {out / 'checkpoints' / 'last.ckpt'} does not exist")
        elif has_run:
            if not t.overwrite:
                raise ConfigError(
                    f"{out} already holds a run; pass --resume to continue it, --overwrite to move it aside, "
                    "or choose another --out"
                )
            aside = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
            out.rename(aside)
            print(f"moved the earlier run in {out} to {aside}", file=sys.stderr)
    os.environ[_OUT_ENV] = str(out)
    return out


def build_trainer(cfg: Config, out: Path) -> L.Trainer:
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
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=t.strategy,
        precision=t.precision,
        max_epochs=cfg.optim.epochs,
        gradient_clip_val=cfg.optim.grad_clip or None,
        default_root_dir=out,
        logger=[CSVLogger(out, name="logs", version=""), TensorBoardLogger(out, name="tb", version="")],
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        fast_dev_run=t.fast_dev_run,
        log_every_n_steps=t.log_every_n_steps,
        enable_model_summary=False,
        # On resume the sanity-check pass would draw from the RNG just restored and shift every later shuffle.
        num_sanity_val_steps=0 if t.resume else 2,
    )


def run(cfg: Config) -> dict:
    """Train (or resume) the run ``cfg`` describes; return its results (also written to results.json)."""
    out = resolve_out(cfg)
    ckpt_path = None
    if cfg.trainer.resume:
        ckpt_path = out / "checkpoints" / "last.ckpt"
        load_checkpoint(ckpt_path)  # a corrupt or foreign file fails here, in one line
    L.seed_everything(cfg.trainer.seed, workers=True, verbose=False)
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    dm.train_resolutions = list(cfg.trainer.train_resolutions)  # one resolution per batch; see vitpos.data.base
    cfg.model.num_classes, cfg.model.in_chans = dm.num_classes, dm.in_chans
    lit = LitViT(cfg.to_dict())
    if cfg.trainer.compile:
        lit.model.compile()
    trainer = build_trainer(cfg, out)
    if trainer.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        if not cfg.trainer.fast_dev_run:
            cfg.save_yaml(out / "config.yaml")
        world = trainer.world_size
        scaled = "scaled linearly (x global/256)" if cfg.optim.lr_scaling == "linear" else "not scaled with the batch"
        print(
            f"vitpos: pos={cfg.model.pos} stem={cfg.model.stem} data={cfg.data.name} img={cfg.model.img_size} "
            f"params={sum(p.numel() for p in lit.parameters()) / 1e6:.2f}M out={out}\n"
            f"vitpos: global batch = {cfg.data.batch_size} per device x {trainer.num_devices} devices x "
            f"{trainer.num_nodes} nodes = {cfg.data.batch_size * world}; lr {cfg.optim.lr:g} {scaled}",
            flush=True,
        )
    start = time.perf_counter()
    trainer.fit(lit, datamodule=dm, ckpt_path=ckpt_path, weights_only=True)
    train_seconds = time.perf_counter() - start
    results: dict = {"out": str(out), "train_seconds": round(train_seconds, 1)}
    if cfg.trainer.fast_dev_run:
        return results
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    tested = trainer.test(lit, datamodule=dm, ckpt_path=best or None, weights_only=True, verbose=False)
    results.update(
        {
            "pos": cfg.model.pos,
            "stem": cfg.model.stem,
            "data": cfg.data.name,
            "epochs": cfg.optim.epochs,
            "global_step": trainer.global_step,
            "last_val": val,
            "best_val_top1": float(trainer.checkpoint_callback.best_model_score or float("nan")),
            "best_checkpoint": best,
            "test": {k: float(v) for k, v in (tested[0] if tested else {}).items()},
        }
    )
    if trainer.is_global_zero:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print(
            f"vitpos: done in {train_seconds:.0f}s; best val top-1 {results['best_val_top1']:.4f}, "
            f"test top-1 {results['test'].get('test/top1', float('nan')):.4f}; results in {out / 'results.json'}",
            flush=True,
        )
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``train.py``: a bad input ends in one line on stderr and exit status 2."""
    args = build_parser().parse_args(argv)
    try:
        base = None
        if getattr(args, "resume", False) and getattr(args, "out", None):
            last = Path(args.out) / "checkpoints" / "last.ckpt"
            if last.is_file():  # the run's own config; flags given now still override it
                base = config_from_checkpoint(load_checkpoint(last))
        cfg = config_from_args(args, base=base)
        run(cfg)
    except ConfigError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 2
    except FloatingPointError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("train.py: interrupted; the last checkpoint is kept", file=sys.stderr)
        return 130
    return 0
