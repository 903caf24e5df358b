"""Input-pipeline cost per CPU core: the same JPEGs read as an ImageFolder and streamed from LitData shards.

    python benchmarks/data_loading.py --images 320 --repeats 3 --write docs/data.md

What one run does, in one process:

1. Writes ``--images`` ImageNet-like JPEGs (random crops of scikit-learn's two bundled photos, flipped and
   resized to a 375-500 px long side, quality 90; ten class folders) and shards them with ``vitpos.data.shard``.
2. Reads them through the ImageNet training pipeline of ``configs/imagenet.yaml`` (224 px: RandomResizedCrop,
   hflip, RandAugment rand-m9-mstd0.5-inc1 clipped at magnitude 9, to tensor, normalise) in one loader process
   (``num_workers=0``, one torch thread), batch 64: as an ImageFolder (PIL open + decode per file), and from
   the shards (``--data shards``: StreamingDataLoader, PIL decode of the stored bytes). The same two readers
   also run without the transforms (decode only). The four run round-robin for ``--repeats`` rounds.
3. Counts images per CPU-second of the process (``time.process_time``): the work one core does, largely
   independent of other load on the machine. The page cache is warm (the files were just written), so the
   figures are CPU cost; what a shared file system adds per small file is not measured here.
4. From that and a published ViT-S/16 training throughput (``PUBLISHED``; no GPU figure of vitpos's own
   exists yet) it derives how many loader workers (one core each) one 8-GPU node needs.

The measurement goes to ``docs/data.json``; ``docs/data.md`` is rendered from it (``--render-only``
re-renders the page from an existing JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from vitpos.config import Config  # noqa: E402
from vitpos.data import build_datamodule  # noqa: E402
from vitpos.data.base import TransformDataset  # noqa: E402
from vitpos.data.shard import write_shards  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GPUS_PER_NODE = 8
# A published training throughput for ViT-S/16 at 224 px (no vitpos GPU measurement exists yet).
PUBLISHED = {
    "model": "vit_small_patch16_224 (ViT-S/16, 224 px)",
    "train_img_per_s": 1052.92,
    "hardware": "one RTX 3090, AMP, batch 384, PyTorch 1.12 / CUDA 11.3",
    "source": "timm's benchmark table results/benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv "
    "(huggingface/pytorch-image-models)",
}


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


def imagenet_data_config(name: str, data_dir: Path, transforms: bool):
    cfg = Config.from_yaml(ROOT / "configs" / "imagenet.yaml").data
    cfg.name, cfg.data_dir, cfg.batch_size, cfg.num_workers = name, str(data_dir), 64, 0
    # Magnitudes clipped at 9: at 10 timm's posterize keeps 0 bits, which Pillow 13 refuses (ValueError).
    cfg.randaugment = f"{cfg.randaugment}-mmax9" if cfg.randaugment else None
    if not transforms:  # decode only: the eval geometry at the image's own size would still resize; skip it all
        cfg.random_resized_crop, cfg.hflip, cfg.randaugment = False, False, None
    return cfg


class DecodeOnly:
    """PIL image -> the same image (forces nothing more than the decode the loader already did)."""

    def __call__(self, img: Image.Image) -> Image.Image:
        return img


def loaders(folder: Path, shards: Path) -> dict:
    """name -> a zero-argument function returning one epoch's iterable of (x, y)."""
    from torch.utils.data import DataLoader

    from vitpos.data.shards import DecodeSample

    out = {}
    for transforms in (True, False):
        suffix = "" if transforms else " (decode only)"
        dm = build_datamodule(imagenet_data_config("imagefolder", folder, transforms), 224)
        dm.setup("fit")
        ds = dm.train_set if transforms else TransformDataset(dm.raw("train"), DecodeOnly())
        collate = None if transforms else (lambda items: items)
        out[f"ImageFolder{suffix}"] = lambda ds=ds, collate=collate: DataLoader(
            ds, batch_size=64, shuffle=True, collate_fn=collate
        )
        sm = build_datamodule(imagenet_data_config("shards", shards, transforms), 224)
        sm.setup("fit")
        if not transforms:
            sm.train_set.transform = [DecodeSample(DecodeOnly(), 3, "train")]
        loader = sm.train_dataloader()
        if not transforms:
            loader.collate_fn.collate_fn = lambda items: items
        out[f"shards{suffix}"] = lambda loader=loader: loader
    return out


def measure(fns: dict, repeats: int) -> dict:
    """Round-robin (A, B, ..., then reversed); per reader the median images per CPU-second and per wall-second."""
    per_cpu: dict[str, list[float]] = {k: [] for k in fns}
    per_wall: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            n = 0
            c0, w0 = time.process_time(), time.perf_counter()
            for batch in fns[name]():
                n += len(batch[0]) if isinstance(batch, list | tuple) and torch.is_tensor(batch[0]) else len(batch)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            per_cpu[name].append(n / cpu)
            per_wall[name].append(n / wall)
            print(f"  round {r + 1}: {name}: {n} images, {n / cpu:.1f} img/CPU-s, {n / wall:.1f} img/s", flush=True)
    return {
        k: {"img_per_cpu_s": statistics.median(per_cpu[k]), "img_per_s": statistics.median(per_wall[k]),
            "rounds_img_per_cpu_s": [round(v, 2) for v in per_cpu[k]]}
        for k in fns
    }  # fmt: skip


def workers_needed(per_core: float, gpu_img_s: float, gpus: int = GPUS_PER_NODE) -> int:
    return math.ceil(gpus * gpu_img_s / per_core)


def render(result: dict) -> str:
    """docs/data.md from the JSON record."""
    m, pub, src = result["measured"], result["published"], result["images"]
    lines = [
        "# Data loading: ImageFolder against streaming shards",
        "",
        "Generated by `benchmarks/data_loading.py` from `docs/data.json`; rerun it to refresh this page.",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Date: {result['date']}. Machine: {result['cpu']}, {result['cores']} cores, load average "
        f"{result['load_average']} at start; one loader process, one torch thread; Python {result['python']}, "
        f"torch {result['torch']}, litdata {result['litdata']}.",
        "",
        f"Images: {src['images']} JPEGs like ImageNet's (crops of scikit-learn's two bundled photos, "
        f"375-500 px long side, quality 90): {src['mean_kb']:.0f} KB and {src['mean_megapixels']:.3f} megapixels "
        "on average. Pipeline: "
        "the ImageNet training transforms of `configs/imagenet.yaml` at 224 px (RandomResizedCrop 0.08-1, hflip, "
        "RandAugment rand-m9-mstd0.5-inc1, normalise; magnitudes clipped at 9 (`-mmax9`): at 10 timm's posterize asks "
        "for 0 bits, which Pillow 13 refuses), batch 64; mixup / cutmix run on the accelerator, not in "
        "the loader. Decode only: the same readers without the transforms.",
        "",
        "| reader | images / CPU-second (one core) | images / s (wall) | rounds (img / CPU-s) |",
        "|---|---:|---:|---|",
    ]
    for name, r in m.items():
        rounds = ", ".join(f"{v:.0f}" for v in r["rounds_img_per_cpu_s"])
        lines.append(f"| {name} | {r['img_per_cpu_s']:.0f} | {r['img_per_s']:.0f} | {rounds} |")
    folder, shard = m["ImageFolder"]["img_per_cpu_s"], m["shards"]["img_per_cpu_s"]
    need = pub["train_img_per_s"] * GPUS_PER_NODE
    lines += [
        "",
        "Per CPU-second is the figure to use: the wall rate also reflects what else the machine ran (see the load "
        "average above). These JPEGs are smaller than ImageNet's (its training set averages about 110 KB per image, "
        "138 GB for 1.28 M images), so real ImageNet files decode slower per core and need more workers than below.",
        "",
        f"Shards / ImageFolder, full pipeline: {shard / folder:.2f}x per core. The CPU work is the same JPEG decode "
        "and the same transforms either way; what the shards save is the per-file open and metadata traffic of a "
        "shared file system, which a warm local page cache (as here) does not show.",
        "",
        "## Loader workers for one 8-GPU node, ViT-S/16 at 224 px",
        "",
        f"Published training throughput: **{pub['train_img_per_s']:.0f} img/s** per GPU for {pub['model']} on "
        f"{pub['hardware']} ({pub['source']}). vitpos has no GPU measurement of its own yet "
        "(`benchmarks/gpu_check.sh` is prepared for one; docs/performance.md holds CPU figures only).",
        "",
        f"One node of {GPUS_PER_NODE} such GPUs consumes {need:.0f} img/s. At the per-core rates above:",
        "",
        "| reader | img/s per core | workers (cores) per GPU | workers per 8-GPU node |",
        "|---|---:|---:|---:|",
    ]
    for name in ("ImageFolder", "shards"):
        rate = m[name]["img_per_cpu_s"]
        lines.append(
            f"| {name} | {rate:.0f} | {workers_needed(rate, pub['train_img_per_s'], 1)} "
            f"| {workers_needed(rate, pub['train_img_per_s'])} |"
        )
    lines += [
        "",
        "workers = ceil(GPUs x GPU img/s / img/s per core), one core per loader worker. For a faster GPU, scale "
        "with its own training throughput (the per-core rates do not change). A node with fewer cores than that "
        "is input-bound with this recipe whatever the storage: lighter augmentation, GPU-side decode, or fewer, "
        "smaller stored images (`--quality`, a resized copy) are then what helps, not the file format.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=320)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write", help="write the page here (its JSON beside it, .json)")
    p.add_argument("--render-only", action="store_true", help="re-render --write from its existing JSON")
    args = p.parse_args(argv)
    page = Path(args.write) if args.write else None
    if args.render_only:
        if page is None:
            p.error("--render-only needs --write PAGE")
        page.write_text(render(json.loads(page.with_suffix(".json").read_text())))
        return 0
    torch.set_num_threads(1)
    import litdata

    with tempfile.TemporaryDirectory() as tmp:
        folder, shards = Path(tmp, "folder"), Path(tmp, "shards")
        stats = make_jpegs(folder, args.images)
        print(f"wrote {stats['images']} JPEGs, {stats['mean_kb']:.0f} KB on average; sharding", flush=True)
        cfg = imagenet_data_config("imagefolder", folder, True)
        write_shards(cfg, shards, splits=["train", "val"], workers=2, verbose=False)
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        measured = measure(loaders(folder, shards), args.repeats)
    result = {
        "command": shlex.join(["python", "benchmarks/data_loading.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "load_average": load,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "litdata": litdata.__version__,
        "images": stats,
        "measured": measured,
        "published": PUBLISHED,
        "workers_per_node": {
            k: workers_needed(v["img_per_cpu_s"], PUBLISHED["train_img_per_s"]) for k, v in measured.items()
        },  # fmt: skip
    }
    text = render(result)
    if page is not None:
        page.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        page.write_text(text)
        print(f"wrote {page} and {page.with_suffix('.json')}")
    else:
        print(text)
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    raise SystemExit(main())
