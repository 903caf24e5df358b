"""python -m vitpos.evaluate: the sweep and its report from the command line."""

from __future__ import annotations

import argparse
import sys

import torch
from lightning.pytorch.utilities import rank_zero_only

from ..cli import OneLineParser
from ..errors import ConfigError
from ..regime import PLACES, REGIMES, Canvas
from ..resolution import parse_resolution
from .report import markdown_table, sweep_and_write
from .sweep import LOGIT_SCALINGS, POOLS, EvalData


def build_parser() -> argparse.ArgumentParser:
    from ..config import ACCELERATORS, PRECISIONS, data_names, strategy_names
    from ..pos import POS_REGISTRY

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
    a("--regimes", nargs="+", choices=REGIMES, default=["zoom"], metavar="NAME",
      help="transfer regimes {zoom: the scene grows with the image; canvas: the scene keeps its training size on a "
           "larger background} (default: zoom)")  # fmt: skip
    a("--canvas-place", choices=PLACES, default="centre",
      help="canvas: where the scene sits, on the patch grid {centre, corner} (default: centre)")  # fmt: skip
    a("--canvas-shift", type=int, default=0, metavar="PX",
      help="canvas: move the scene by PX pixels along both axes; not a multiple of the patch: off the grid "
           "(default: 0)")  # fmt: skip
    a("--pool", choices=POOLS, default="all",
      help="control: average all patch tokens, or only the scene's (canvas) {all, scene} (default: all)")  # fmt: skip
    a("--logit-scaling", choices=LOGIT_SCALINGS, default="none",
      help="control: scale attention logits by log N / log N_train {none, logn} (default: none)")  # fmt: skip
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
    from ..config import ACCELERATORS, PRECISIONS, strategy_names
    from ..training import quiet_logs

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
                        interpolation=args.interpolation, regimes=tuple(args.regimes),
                        canvas=Canvas(args.canvas_place, max(args.canvas_shift, 0)), pool=args.pool,
                        logit_scaling=args.logit_scaling)  # fmt: skip
        if args.canvas_shift < 0:
            raise ConfigError(f"--canvas-shift must be >= 0 pixels, got {args.canvas_shift}")
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
