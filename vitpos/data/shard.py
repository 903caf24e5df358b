"""Write a data set's splits once as LitData shards, to stream them from local disk or object storage.

    python -m vitpos.data.shard --data imagefolder --data-dir /data/imagenet --out /data/imagenet-shards --workers 16
    python train.py --data shards --data-dir /data/imagenet-shards ...

Any set vitpos reads can be sharded (``--data`` as for ``train.py``, ``hf:PATH`` included). The output:

    DST/meta.json    what the set is: source, class names, channels, mean / std, native size, samples per split
    DST/<split>/     LitData chunks and index.json, one folder per split (train, val, test)

Each sample is ``{"image": bytes, "label": int, "index": int}`` (``index``: its position in the source
split). Images stay encoded: image files (``imagefolder``, ``hf:``) keep their bytes as found; arrays
(torchvision sets, idx files, digits, ``shapes`` rendered at ``--img-size``) are written as PNG (lossless);
``--quality Q`` re-encodes every image as JPEG at quality Q. Splits are exactly those the source data
module serves (its holdout included), so training from the shards sees what training from the source sees.

Interrupted? Run the same command again: finished splits (those with index.json) are kept and LitData's
per-worker checkpoints continue the unfinished one. ``--overwrite`` starts afresh.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import re
import shutil
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset, Subset

from ..cli import OneLineParser, add_config_flags, given_fields
from ..config import DataConfig, ModelConfig, TrainerConfig
from ..errors import ConfigError
from .base import SPLITS, VitposDataModule
from .shards import FORMAT, META


def class_names(dm: VitposDataModule) -> list[str]:
    """The data module's class names where its source has them, else the label numbers as strings."""
    names = getattr(dm, "classes", None)
    if names is None and dm.name == "shapes":
        from .shapes import RELATIONS, SHAPES

        names = [f"{s}-{r}" for s in SHAPES for r in RELATIONS]  # label = 4 * shape + relation
    if names is None:
        base = dm.raw("train")
        while isinstance(base, Subset):
            base = base.dataset
        names = getattr(base, "classes", None)
    names = [str(n) for n in names] if names is not None else [str(i) for i in range(dm.num_classes)]
    if len(names) != dm.num_classes:
        names = [str(i) for i in range(dm.num_classes)]
    return names


def _file_of(ds: Dataset, i: int) -> str | None:
    """The image file behind item i of an ImageFolder-like set (through Subsets), or None."""
    while isinstance(ds, Subset):
        ds, i = ds.dataset, ds.indices[i]
    samples = getattr(ds, "samples", None)
    return samples[i][0] if samples is not None else None


def encode_pil(img: Image.Image, quality: int | None) -> bytes:
    """PNG (lossless), or JPEG at `quality`."""
    buf = io.BytesIO()
    if quality is None:
        img.save(buf, format="PNG")
    else:
        img.convert("RGB" if img.mode not in ("L", "RGB") else img.mode).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


class SampleWriter:
    """``fn`` for ``litdata.optimize``: input index i -> the stored sample. Picklable; each worker builds
    the data module once (LitData starts its workers with spawn)."""

    def __init__(self, cfg: DataConfig, img_size: int, seed: int, split: str, quality: int | None) -> None:
        self.cfg, self.img_size, self.seed, self.split, self.quality = cfg, img_size, seed, split, quality
        self._ds: Dataset | None = None
        self._dm: VitposDataModule | None = None

    def _source(self) -> Dataset:
        if self._ds is None:
            from . import build_datamodule

            self._dm = build_datamodule(self.cfg, self.img_size, self.seed)
            self._ds = self._dm.raw(self.split) if self._dm.name != "shapes" else None  # type: ignore[assignment]
        return self._ds  # type: ignore[return-value]

    def __call__(self, i: int) -> dict[str, Any]:
        if self._ds is None and self._dm is None and multiprocessing.parent_process() is not None:
            _end_helpers_with_worker()  # the first item in a LitData worker process
        ds = self._source()
        if ds is None:  # shapes: rendered at img_size, the scene of index i of the split's stream
            from .shapes import render_shapes

            img, label = render_shapes(1, self.img_size, self.img_size, self._dm.split_seed(self.split), start=i)  # type: ignore[union-attr]
            pil = Image.fromarray((img[0] * 255).round().byte().permute(1, 2, 0).numpy())
            return {"image": encode_pil(pil, self.quality), "label": int(label[0]), "index": int(i)}
        encoded = getattr(ds, "encoded", None)  # hf: the bytes as stored
        path = _file_of(ds, i)
        if self.quality is None and encoded is not None:
            data, label = encoded(i)
        elif self.quality is None and path is not None:
            data, label = Path(path).read_bytes(), _label_of(ds, i)
            _check_decodes(data, path)
        else:
            pil, label = ds[i]
            data = encode_pil(pil, self.quality)
        return {"image": data, "label": int(label), "index": int(i)}


def _end_helpers_with_worker() -> None:
    """After any failure LitData ends its workers with SIGTERM. Each worker has started a helper process of its
    own (a file remover, blocked on its queue until the worker's normal end), which would outlive the worker,
    orphaned; so on SIGTERM a worker ends its helpers first."""

    def end(signum: int, frame: Any) -> None:
        for helper in multiprocessing.active_children():
            helper.terminate()
            helper.join()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, end)


def _label_of(ds: Dataset, i: int) -> int:
    while isinstance(ds, Subset):
        ds, i = ds.dataset, ds.indices[i]
    return int(ds.targets[i])  # type: ignore[attr-defined]


def _check_decodes(data: bytes, name: str) -> None:
    """An undecodable file is an error now, not a surprise in the middle of a training run."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Exception as e:  # PIL raises many types for a bad file
        why = "not an image PIL can read" if isinstance(e, UnidentifiedImageError) else str(e).splitlines()[0]
        raise ConfigError(f"cannot decode image {name}: {why}") from None


def describe(dm: VitposDataModule, img_size: int, quality: int | None, sizes: dict[str, int]) -> dict[str, Any]:
    """meta.json: everything the reader needs without opening the source."""
    return {
        "format": FORMAT,
        "source": dm.name,
        "num_classes": dm.num_classes,
        "classes": class_names(dm),
        "in_chans": dm.in_chans,
        "mean": list(dm.mean),
        "std": list(dm.std),
        "native_size": dm.native_size if dm.name not in ("shapes",) else img_size,
        "encoding": "png, or the source files' bytes" if quality is None else f"jpeg q{quality}",
        "splits": sizes,
    }


def write_shards(
    cfg: DataConfig,
    out: str | Path,
    *,
    img_size: int = 32,
    seed: int = 0,
    splits: Sequence[str] = SPLITS,
    workers: int = 1,
    quality: int | None = None,
    chunk_bytes: str = "64MB",
    overwrite: bool = False,
    verbose: bool = True,
) -> dict[str, Any]:
    """Shard `splits` of the set `cfg` into `out` (resuming an interrupted run); returns meta.json's content."""
    from litdata import optimize

    from . import build_datamodule

    if cfg.name == "shards":
        raise ConfigError("--data shards is already sharded; pass the data set it was made from")
    if quality is not None and not 1 <= quality <= 100:
        raise ConfigError(f"--quality must be in 1..100, got {quality}")
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    for s in splits:
        if s not in SPLITS:
            raise ConfigError(f"unknown split '{s}'; valid: {', '.join(SPLITS)}")
    dm = build_datamodule(cfg, img_size, seed)
    sizes = {s: (cfg_size(cfg, s) if dm.name == "shapes" else len(dm.raw(s))) for s in splits}  # type: ignore[arg-type]
    meta = describe(dm, img_size, quality, sizes)
    root = Path(out)
    if overwrite and root.exists():
        shutil.rmtree(root)
    old = root / META
    if old.is_file():
        before = json.loads(old.read_text())
        if {k: v for k, v in before.items() if k != "splits"} != {k: v for k, v in meta.items() if k != "splits"}:
            raise ConfigError(f"{root} holds shards of another set or encoding; pass --overwrite or another --out")
        meta["splits"] = {**before.get("splits", {}), **sizes}
    elif root.exists() and any(root.iterdir()):
        raise ConfigError(f"{root} is not empty and holds no {META}; pass --overwrite or another --out")
    root.mkdir(parents=True, exist_ok=True)
    (root / META).write_text(json.dumps(meta, indent=2) + "\n")
    for split in splits:
        dest = root / split
        if (dest / "index.json").is_file():
            _say(verbose, f"{split}: already written ({dest}/index.json); kept")
            continue
        _say(verbose, f"{split}: {sizes[split]} images -> {dest} ({workers} worker(s))")
        writer = SampleWriter(cfg, img_size, seed, split, quality)
        before = set(multiprocessing.active_children())
        # LitData drains its workers' message queue only when verbose; without that a failed worker leaves the
        # run waiting forever. So it always runs verbose, and quiet means its output goes nowhere.
        quiet = contextlib.ExitStack()
        if not verbose:
            sink = quiet.enter_context(open(os.devnull, "w"))  # noqa: SIM115
            quiet.enter_context(contextlib.redirect_stdout(sink))
            quiet.enter_context(contextlib.redirect_stderr(sink))
        with quiet, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                optimize(
                    fn=writer,
                    inputs=list(range(sizes[split])),
                    output_dir=str(dest),
                    chunk_bytes=chunk_bytes,
                    num_workers=workers,
                    use_checkpoint=True,  # an interrupted split continues where each worker stopped
                    reorder_files=False,
                    start_method="fork",  # workers inherit the imported modules (spawn re-imports torch in each)
                    verbose=True,
                )
            except RuntimeError as e:  # a worker failed; LitData passes on its traceback as text
                for child in set(multiprocessing.active_children()) - before:
                    child.terminate()  # LitData has sent this already; wait until each worker has ended
                    child.join()
                found = re.search(r"ConfigError: (.*)", str(e))
                why = found.group(1) if found else f"{str(e).strip().splitlines()[-1]}; rerun the command to continue"
                raise ConfigError(f"{split}: {why}") from None
        if not (dest / "index.json").is_file():
            raise ConfigError(f"{split}: writing the shards into {dest} failed (no index.json); see the messages above")
        shutil.rmtree(dest / ".checkpoints", ignore_errors=True)
    return meta


def cfg_size(cfg: DataConfig, split: str) -> int:
    return int(getattr(cfg, f"{split}_size"))


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"vitpos.data.shard: {msg}", file=sys.stderr, flush=True)


# Settings shared with train.py, declared once on the config fields (vitpos.cli).
CONFIG_FLAGS = ("data.data_dir", "data.download", "data.train_size", "data.val_size", "data.test_size",
                "data.holdout_size", "model.img_size", "trainer.seed")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m vitpos.data.shard", description="Write a data set's splits as LitData shards.")
    add_config_flags(p, ["data.name"], required=True)
    add_config_flags(p, CONFIG_FLAGS)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    p.add_argument("--workers", type=int, default=max(1, min(8, os.cpu_count() or 1)), help="writer processes")
    p.add_argument("--quality", type=int, help="re-encode every image as JPEG at this quality (default: keep)")
    p.add_argument("--chunk-bytes", default="64MB", help="size of one shard file (LitData's chunk_bytes)")
    p.add_argument("--overwrite", action="store_true", help="delete what --out holds and start afresh")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        given = given_fields(args, ("data.name", *CONFIG_FLAGS))
        cfg = DataConfig(**{n.split(".")[1]: v for n, v in given.items() if n.startswith("data.")})
        meta = write_shards(cfg, args.out, img_size=given.get("model.img_size", ModelConfig().img_size),
                            seed=given.get("trainer.seed", TrainerConfig().seed), splits=args.splits,
                            workers=args.workers, quality=args.quality, chunk_bytes=args.chunk_bytes,
                            overwrite=args.overwrite, verbose=not args.quiet)  # fmt: skip
    except ConfigError as e:
        print(f"vitpos.data.shard: error: {e}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{s} {n}" for s, n in meta["splits"].items())
    print(f"vitpos.data.shard: {meta['source']} ({meta['num_classes']} classes; {counts}) in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
