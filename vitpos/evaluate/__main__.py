"""python -m vitpos.evaluate: the sweep and its report from the command line."""

from __future__ import annotations

import argparse
import sys

import torch
from lightning.pytorch.utilities import rank_zero_only

from ..cli import OneLineParser, add_config_flags, device_error, given_fields, quiet_logs
from ..config import TrainerConfig
from ..errors import ConfigError
from ..regime import PLACES, REGIMES, Canvas
from ..resolution import parse_resolution
from .report import markdown_table, sweep_and_write
from .sweep import LOGIT_SCALINGS, POOLS, EvalData

# Settings shared with train.py, declared once on the config fields (vitpos.cli): the checkpoint's data settings
# when absent, and where the sweep runs.
DATA_FLAGS = ("data.name", "data.data_dir", "data.crop_ratio", "data.eval_resize", "data.interpolation", "data.mean",
              "data.std", "data.batch_size", "data.num_workers", "data.max_image_pixels")  # fmt: skip
DEVICE_FLAGS = ("trainer.accelerator", "trainer.devices", "trainer.strategy", "trainer.num_nodes", "trainer.precision")


def build_parser() -> argparse.ArgumentParser:
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
    add_config_flags(p, ["model.init_arch"])
    a("--resolutions", nargs="+", required=True, metavar="R", help="test resolutions: R or HxW")
    a("--methods", nargs="+", metavar="NAME",
      help=f"transfer methods {{{methods}}} (default: every method each scheme offers)")  # fmt: skip
    data = p.add_argument_group("data (default: the checkpoint's, or the pretrained model's)")
    add_config_flags(data, DATA_FLAGS, shown="the checkpoint's")
    # earlier spellings of two of them
    data.add_argument("--data-name", dest="name", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    data.add_argument("--resize", dest="eval_resize", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
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
    a("--limit", type=int, help="evaluate only the first N images of the split (quick checks; default: all)")
    add_config_flags(p.add_argument_group("devices"), DEVICE_FLAGS)
    a("--out", help="output folder (default: RUN/resolution/ for RUN/checkpoints/last.ckpt, "
      "RUN/resolution-<stem>/ for another checkpoint of RUN)")  # fmt: skip
    a("--overwrite", action="store_true", help="replace an earlier result in --out")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_logs()
    try:
        if not args.ckpt and not args.init_from:
            raise ConfigError("nothing to evaluate: pass --ckpt FILE ... or --init-from SPEC ...")
        given = given_fields(args, (*DATA_FLAGS, *DEVICE_FLAGS, "model.init_arch"))
        if args.limit is not None and args.limit <= 0:
            raise ConfigError(f"--limit must be a positive integer, got {args.limit}")
        devices = {**{n: getattr(TrainerConfig(), n.split(".")[1]) for n in DEVICE_FLAGS}, **given}
        error = device_error(devices["trainer.accelerator"])
        if error:
            raise ConfigError(error)
        resolutions = [parse_resolution(r) for r in args.resolutions]
        if ("data.mean" in given) != ("data.std" in given):
            raise ConfigError("--mean and --std go together")
        if args.canvas_shift < 0:
            raise ConfigError(f"--canvas-shift must be >= 0 pixels, got {args.canvas_shift}")
        canvas = Canvas(args.canvas_place, args.canvas_shift)
        data = EvalData(**{n.split(".")[1]: v for n, v in given.items() if n in DATA_FLAGS}, split=args.split,
                        limit=args.limit, regimes=tuple(args.regimes), canvas=canvas, pool=args.pool,
                        logit_scaling=args.logit_scaling)  # fmt: skip
        trainer_kwargs = {n.split(".")[1]: devices[n] for n in DEVICE_FLAGS}
        records = sweep_and_write(args.ckpt, resolutions, args.out, trainer_kwargs, methods=args.methods,
                                  data=data, overwrite=args.overwrite, init_from=args.init_from,
                                  init_arch=given.get("model.init_arch"))  # fmt: skip
    except ConfigError as e:
        print(f"vitpos.evaluate: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vitpos.evaluate: interrupted; no result was written", file=sys.stderr)
        return 130
    if rank_zero_only.rank == 0:
        print(markdown_table(records), end="")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Tear the process group down here rather than in interpreter shutdown, where its threads can still be
        # running and abort the process at exit ("terminate called without an active exception").
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
