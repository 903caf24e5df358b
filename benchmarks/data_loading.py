"""Input-pipeline cost per CPU core: the same JPEGs read as an ImageFolder and streamed from shards (JSON only).

    python -m benchmarks.data_loading --images 400 --repeats 5     # docs/data.json
    python -m benchmarks.pages                                     # docs/data.md

ImageNet-like JPEGs are written, sharded with ``vitpos.data.shard`` and read through the training pipeline of
``configs/imagenet.yaml`` in one loader process, with and without the transforms, the readers round-robin; the shards
also without their shuffle (decode only), in the order they were written.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

from benchmarks.common import ROOT, round_robin, write_record
from vitpos.config import Config, DataConfig
from vitpos.data import build_datamodule
from vitpos.data.shard import write_shards


def make_jpegs(root: Path, n: int, classes: int = 10, seed: int = 0) -> dict:
    """n ImageNet-like JPEGs in root/train/<class>/ (and a few in root/val/); returns their size statistics."""
    import numpy as np
    from sklearn.datasets import load_sample_images  # two photos bundled with scikit-learn, offline

    photos = [Image.fromarray(a) for a in load_sample_images().images]
    rng = np.random.default_rng(seed)
    sizes, pixels = [], []
    for split, count in (("train", n), ("val", classes)):
        for i in range(count):
            src = photos[i % len(photos)]
            w, h = src.size
            cw, ch = int(rng.integers(w // 2, w)), int(rng.integers(h // 2, h))
            x, y = int(rng.integers(0, w - cw)), int(rng.integers(0, h - ch))
            img = src.crop((x, y, x + cw, y + ch))
            long_side = int(rng.integers(375, 501))  # ImageNet photos are mostly 500 x 375
            scale = long_side / max(img.size)
            img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.BICUBIC)
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            d = root / split / f"c{i % classes}"
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"{i:05d}.jpg"
            img.save(path, quality=90)
            if split == "train":
                sizes.append(path.stat().st_size)
                pixels.append(img.width * img.height)
    return {"images": n, "mean_kb": statistics.mean(sizes) / 1024, "mean_megapixels": statistics.mean(pixels) / 1e6}


def imagenet_data_config(name: str, data_dir: Path) -> DataConfig:
    """The data config of configs/imagenet.yaml (its training transforms at 224 px) read from ``data_dir``."""
    cfg = Config.from_yaml(ROOT / "configs" / "imagenet.yaml").data
    cfg.name, cfg.data_dir, cfg.batch_size, cfg.num_workers = name, str(data_dir), 64, 0
    return cfg


def keep(x: object) -> object:
    """Decode only: what the reader decoded, as it is (no transform, no collation)."""
    return x


def loaders(folder: Path, shards: Path) -> dict:
    """name -> a zero-argument function returning one epoch's iterable of batches."""
    from litdata import StreamingDataLoader, StreamingDataset
    from torch.utils.data import DataLoader

    from vitpos.data.shards import DecodeSample

    out = {}
    for decode_only in (False, True):
        suffix = " (decode only)" if decode_only else ""
        dm = build_datamodule(imagenet_data_config("imagefolder", folder), 224)
        dm.setup("fit")
        ds, collate = (dm.raw("train"), keep) if decode_only else (dm.train_set, None)
        out[f"ImageFolder{suffix}"] = lambda ds=ds, c=collate: DataLoader(ds, batch_size=64, shuffle=True, collate_fn=c)
        sm = build_datamodule(imagenet_data_config("shards", shards), 224)
        sm.setup("fit")
        if decode_only:  # the stream itself: the training loader also reads the epoch's last partial batch by index
            sm.train_set.transform = DecodeSample(keep, 3, "train")
            loader = StreamingDataLoader(sm.train_set, batch_size=64, collate_fn=keep)
        else:
            loader = sm.train_dataloader()
        out[f"shards{suffix}"] = lambda loader=loader: loader
    # beside the shuffled stream: the files and their samples read in the order they were written (what the
    # item-level shuffle costs)
    stored = StreamingDataset(str(shards / "train"), transform=DecodeSample(keep, 3, "train"))
    out["shards in stored order (decode only)"] = lambda: StreamingDataLoader(stored, batch_size=64, collate_fn=keep)
    return out


def measure(fns: dict, repeats: int) -> dict:
    """Per reader: the median images per CPU-second and per wall-second over rounds, and every round's rate."""
    count: dict[str, int] = {}
    cpu: dict[str, list[float]] = {k: [] for k in fns}

    def epoch(name: str) -> None:  # the CPU time of this process alone, beside round_robin's wall time
        c0, n = time.process_time(), 0
        for b in fns[name]():
            n += len(b[0]) if isinstance(b, list | tuple) and torch.is_tensor(b[0]) else len(b)
        cpu[name].append(time.process_time() - c0)
        count[name] = n

    wall = round_robin({k: lambda k=k: epoch(k) for k in fns}, repeats)
    return {k: {"img_per_cpu_s": statistics.median(count[k] / t for t in cpu[k]),
                "img_per_s": statistics.median(count[k] / t for t in wall[k]),
                "rounds_img_per_cpu_s": [round(count[k] / t, 2) for t in cpu[k]]} for k in fns}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=320)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "docs" / "data.json"))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    import litdata

    with tempfile.TemporaryDirectory() as tmp:
        folder, shards = Path(tmp, "folder"), Path(tmp, "shards")
        stats = make_jpegs(folder, a.images)
        write_shards(
            imagenet_data_config("imagefolder", folder), shards, splits=["train", "val"], workers=2, verbose=False
        )
        measured = measure(loaders(folder, shards), a.repeats)
    write_record(a.out, "data_loading.py", argv, python=platform.python_version(), litdata=litdata.__version__,
                 images=stats, measured=measured)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
