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

The training split is written in an order shuffled by ``--seed`` (recorded in meta.json as ``shuffle``), so that
every shard file holds a mix of the classes even where the source lists them class by class (an image folder does):
a reader that streams the shard files one after another still sees every class in every batch. Validation and test
keep the source's order.

Interrupted? Run the same command again: finished splits (those with index.json) are kept and LitData's
per-worker checkpoints continue the unfinished one. ``--overwrite`` starts afresh: it deletes the shards of an
earlier run in ``--out``, and refuses when the folder holds anything else (it is then not a shard folder).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import multiprocessing.util
import os
import re
import shutil
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset, Subset

from ..cli import OneLineParser, add_config_flags, given_fields
from ..config import DataConfig, ModelConfig, TrainerConfig
from ..errors import ConfigError
from ..outputs import NO_ROOM, make_dir, shell, write_failed
from .base import SPLITS, VitposDataModule
from .images import pixel_limit_error
from .shards import FORMAT, META, check_split


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
            # One thread per worker: the workers are the parallelism, and a forked process that enters OpenMP's
            # thread pool after its parent used it (a training run before, in the same process) hangs.
            torch.set_num_threads(1)
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
    """Each LitData worker starts a helper process of its own (a file remover, blocked on its queue until the
    worker's normal end). After a failure elsewhere LitData ends its workers with SIGTERM, and the helper would
    outlive its worker, orphaned: on SIGTERM a worker ends its helpers first. A worker whose own write failed (a full
    disk) stops without telling its helper, and its exit would wait for the helper forever (and LitData for the
    worker): a worker's exit ends its helpers too (multiprocessing runs exit finalizers before that wait)."""

    def end(signum: int, frame: Any) -> None:
        _end_helpers(grace=0.0)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, end)
    multiprocessing.util.Finalize(None, _end_helpers, exitpriority=0)


def _end_helpers(grace: float = 5.0) -> None:
    """End this process's children, each given ``grace`` seconds to end by itself first."""
    for helper in multiprocessing.active_children():
        helper.join(timeout=grace)
        if helper.is_alive():
            helper.terminate()
            helper.join()


def _label_of(ds: Dataset, i: int) -> int:
    while isinstance(ds, Subset):
        ds, i = ds.dataset, ds.indices[i]
    return int(ds.targets[i])  # type: ignore[attr-defined]


def _check_decodes(data: bytes, name: str) -> None:
    """An undecodable file is an error now, not a surprise in the middle of a training run."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Image.DecompressionBombError as e:
        raise pixel_limit_error(name, e) from None
    except Exception as e:  # PIL raises many types for a bad file
        why = "not an image PIL can read" if isinstance(e, UnidentifiedImageError) else str(e).splitlines()[0]
        raise ConfigError(f"cannot decode image {name}: {why}") from None


def describe(
    dm: VitposDataModule, img_size: int, quality: int | None, sizes: dict[str, int], seed: int
) -> dict[str, Any]:
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
        "shuffle": {"train": seed},  # the split written in the order of permutation(seed), the others as found
        "splits": sizes,
    }


def written_order(split: str, size: int, shuffle: dict[str, int]) -> list[int]:
    """The source indices of ``split`` in the order they are written: a permutation fixed by the recorded seed for a
    shuffled split, the source's order for the others."""
    if split not in shuffle:
        return list(range(size))
    return torch.randperm(size, generator=torch.Generator().manual_seed(int(shuffle[split]))).tolist()


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "k": 10**3, "m": 10**6, "g": 10**9,
          "t": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_bytes(text: str | int) -> int:
    """'64MB', '512kB', '1GiB' or a number of bytes -> bytes; anything else is a ConfigError."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = found.group(2).lower() if found else None
    if unit not in _UNITS or int(float(found.group(1)) * _UNITS[unit]) < 1:  # type: ignore[union-attr]
        raise ConfigError(f"--chunk-bytes must be a size such as 64MB, 512kB or 1GiB, got '{text}'")
    return int(float(found.group(1)) * _UNITS[unit])  # type: ignore[union-attr]


def foreign_entries(root: Path) -> list[str]:
    """What ``root`` holds besides the shards vitpos.data.shard writes (meta.json, and LitData's files in one
    folder per split): the things ``--overwrite`` must not delete."""
    foreign = []
    for p in sorted(root.iterdir()):
        if p.name == META and p.is_file() and _is_meta(p):
            continue
        if p.name in SPLITS and p.is_dir() and all(_is_litdata_file(q.name) for q in p.iterdir()):
            continue
        foreign.append(p.name + ("/" if p.is_dir() else ""))
    return foreign


def _is_meta(path: Path) -> bool:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and {"format", "source", "splits"} <= set(meta)


def _is_litdata_file(name: str) -> bool:
    """A file LitData's writer leaves in an output folder: chunks, (per-worker) indexes, its checkpoints."""
    return name == ".checkpoints" or re.fullmatch(r"chunk-\d+-\d+\.bin|(\d+-)?index\.json", name) is not None


def _prepare_out(root: Path, meta: dict[str, Any], sizes: dict[str, int], overwrite: bool) -> None:
    """Make ``root`` ready for ``meta``'s shards: refuse a folder that holds something else, delete an earlier run's
    shards only with ``overwrite``, and check that a rerun asks for what the finished splits hold."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--out {root} is a file, not a folder")
    if root.is_dir() and any(root.iterdir()):
        foreign = foreign_entries(root)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise ConfigError(
                f"{root} holds files vitpos.data.shard did not write ({shown}); choose another --out (a new or "
                "empty folder)"
            )
        if overwrite:
            for name in (META, *SPLITS):
                target = root / name
                if target.is_dir():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
    old = root / META
    if old.is_file():
        before = json.loads(old.read_text())
        differ = sorted(k for k in {*before, *meta} - {"splits"} if before.get(k) != meta.get(k))
        if differ:
            raise ConfigError(
                f"{root} holds shards of another set, encoding or order (they differ in {', '.join(differ)}); "
                "pass --overwrite to write them again, or another --out"
            )
        for split, n in sizes.items():
            had = before.get("splits", {}).get(split)
            if (root / split).is_dir() and had is not None and had != n:
                raise ConfigError(
                    f"{root / split} holds {had} images, this command gives {n}; pass --overwrite to write them "
                    "again, or another --out"
                )
        meta["splits"] = {**before.get("splits", {}), **sizes}
    make_dir(root)
    try:
        (root / META).write_text(json.dumps(meta, indent=2) + "\n")
    except OSError as e:
        raise write_failed(e, root / META, "nothing was written") from None


def write_shards(
    cfg: DataConfig,
    out: str | Path,
    *,
    img_size: int = 32,
    seed: int = 0,
    splits: Sequence[str] = SPLITS,
    workers: int = 1,
    quality: int | None = None,
    chunk_bytes: str | int = "64MB",
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
    for flag, value in (("--img-size", img_size), ("--max-image-pixels", cfg.max_image_pixels)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    for s in splits:
        if s not in SPLITS:
            raise ConfigError(f"unknown split '{s}'; valid: {', '.join(SPLITS)}")
    chunk = parse_bytes(chunk_bytes)
    dm = build_datamodule(cfg, img_size, seed)
    sizes = {s: (cfg_size(cfg, s) if dm.name == "shapes" else len(dm.raw(s))) for s in splits}  # type: ignore[arg-type]
    meta = describe(dm, img_size, quality, sizes, seed)
    root = Path(out)
    _prepare_out(root, meta, sizes, overwrite)
    for split in splits:
        dest = root / split
        if (dest / "index.json").is_file():
            _say(verbose, f"{split}: already written ({dest}/index.json); kept")
            continue
        _say(verbose, f"{split}: {sizes[split]} images -> {dest} ({workers} worker(s))")
        writer = SampleWriter(cfg, img_size, seed, split, quality)
        before = set(multiprocessing.active_children())
        # LitData drains its workers' message queue only when verbose; without that a failed worker leaves the
        # run waiting forever. So it always runs verbose; what it prints on stdout (its steps, an advert) goes
        # nowhere, its progress bar (stderr) shows unless quiet.
        quiet = contextlib.ExitStack()
        sink = quiet.enter_context(open(os.devnull, "w"))  # noqa: SIM115
        quiet.enter_context(contextlib.redirect_stdout(sink))
        if not verbose:
            quiet.enter_context(contextlib.redirect_stderr(sink))
        with quiet, warnings.catch_warnings(), _ctrl_c_in_this_process():
            warnings.simplefilter("ignore")
            try:
                optimize(
                    fn=writer,
                    inputs=written_order(split, sizes[split], meta["shuffle"]),
                    output_dir=str(dest),
                    chunk_bytes=chunk,
                    num_workers=workers,
                    use_checkpoint=True,  # an interrupted split continues where each worker stopped
                    reorder_files=False,
                    start_method="fork",  # workers inherit the imported modules (spawn re-imports torch in each)
                    verbose=True,
                )
            except (RuntimeError, KeyboardInterrupt) as e:  # a worker failed (LitData passes on its traceback as text)
                for child in set(multiprocessing.active_children()) - before:
                    child.terminate()  # LitData has sent this already; wait until each worker has ended
                    child.join()
                if isinstance(e, KeyboardInterrupt):
                    raise
                raise ConfigError(f"{split}: {_worker_failure(str(e))}") from None
        _check_written(dest, sizes[split])
        shutil.rmtree(dest / ".checkpoints", ignore_errors=True)
    return meta


@contextlib.contextmanager
def _ctrl_c_in_this_process() -> Iterator[None]:
    """Ctrl-C while LitData writes: a KeyboardInterrupt in this process, nothing in its workers.

    LitData's writer answers SIGINT with ``os._exit(0)``, a silent exit with status 0, so it is not let install
    its handler (``signal.signal`` ignores SIGINT meanwhile). The terminal sends SIGINT to every process of its
    group; the workers, forked with this handler, ignore it, and this process ends them."""
    here, install = os.getpid(), signal.signal

    def on_ctrl_c(signum: int, frame: Any) -> None:
        if os.getpid() == here:
            raise KeyboardInterrupt

    def install_but_sigint(signum: int, handler: Any) -> Any:
        return signal.getsignal(signum) if signum == signal.SIGINT else install(signum, handler)

    previous = install(signal.SIGINT, on_ctrl_c)
    signal.signal = install_but_sigint  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = install
        install(signal.SIGINT, previous)


def _check_written(dest: Path, size: int) -> None:
    """The split in ``dest`` holds ``size`` samples in whole chunk files, or it is removed (a rerun writes it again):
    LitData can end without an error after a write of its failed (a full disk), with chunks missing from its index."""
    try:
        written = check_split(str(dest.parent), dest.name)
    except ConfigError:
        written = None
    if written == size:
        return
    shutil.rmtree(dest, ignore_errors=True)
    held = "no readable index" if written is None else f"{written} of {size} images"
    raise ConfigError(
        f"{dest.name}: the shards written into {dest} hold {held} (a write failed: is the disk full, or a quota or "
        "file-size limit reached?); that split was removed and finished splits are kept: make room and run the same "
        "command again"
    )


def _worker_failure(text: str) -> str:
    """One line for a writer worker's failure, from the traceback text LitData passes on."""
    found = re.search(r"(?:ConfigError|PixelLimitError|DecodeError): (.*)", text)  # vitpos's one-line errors
    if found:
        return found.group(1)
    room = re.search(r"OSError: \[Errno (\d+)\] ([^:\n]*)", text)
    if room and int(room.group(1)) in NO_ROOM:
        return (
            f"{room.group(2)} (the disk is full, or a quota or file-size limit is reached); the finished splits "
            "are kept: make room and run the same command again to continue"
        )
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return f"{lines[-1].strip() if lines else 'a writer process failed'}; run the same command again to continue"


def cfg_size(cfg: DataConfig, split: str) -> int:
    return int(getattr(cfg, f"{split}_size"))


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"vitpos.data.shard: {msg}", file=sys.stderr, flush=True)


# Settings shared with train.py, declared once on the config fields (vitpos.cli).
CONFIG_FLAGS = ("data.data_dir", "data.download", "data.train_size", "data.val_size", "data.test_size",
                "data.holdout_size", "data.max_image_pixels", "model.img_size", "trainer.seed")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m vitpos.data.shard", description="Write a data set's splits as LitData shards.")
    add_config_flags(p, ["data.name"], required=True)
    add_config_flags(p, CONFIG_FLAGS)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    p.add_argument("--workers", type=int, default=max(1, min(8, os.cpu_count() or 1)), help="writer processes")
    p.add_argument("--quality", type=int, help="re-encode every image as JPEG at this quality (default: keep)")
    p.add_argument("--chunk-bytes", default="64MB", help="size of one shard file (LitData's chunk_bytes)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the shards --out holds and start afresh (refused if it holds other files)",
    )
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
    except KeyboardInterrupt:
        if not args.quiet:
            print(file=sys.stderr)  # below LitData's progress bar, not beside it
        print(
            "vitpos.data.shard: interrupted; the finished splits are kept, and the same command continues the "
            f"rest: {shell('python', '-m', 'vitpos.data.shard', *(argv if argv is not None else sys.argv[1:]))}",
            file=sys.stderr,
        )
        return 130
    counts = ", ".join(f"{s} {n}" for s, n in meta["splits"].items())
    print(f"vitpos.data.shard: {meta['source']} ({meta['num_classes']} classes; {counts}) in {shell(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
