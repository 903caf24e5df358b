"""docs/data.md: images per CPU core read as an ImageFolder and from shards, and the loader workers one GPU node needs
at a published training throughput, from docs/data.json."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.pages.common import anchors, fill, measured_line, table

GPUS_PER_NODE = 8


def workers_needed(per_core: float, gpu_img_s: float, gpus: int = GPUS_PER_NODE) -> int:
    """The fewest one-core loader workers that keep ``gpus`` GPUs fed."""
    return math.ceil(gpus * gpu_img_s / per_core)


def render(d: dict, folder: Path) -> str:
    meas, src, a = d["measured"], d["images"], anchors()
    ref, inet = a["vit_s16_train_throughput"], a["imagenet_train"]
    gpu, per_core = ref["train_img_per_s"], {k: meas[k]["img_per_cpu_s"] for k in ("ImageFolder", "shards")}
    return fill(
        "data.md",
        measured=measured_line(d),
        images=str(src["images"]),
        mean_kb=f"{src['mean_kb']:.0f}",
        mean_megapixels=f"{src['mean_megapixels']:.3f}",
        imagenet_kb=f"{1e6 * inet['gigabytes'] / inet['images']:.0f}",
        imagenet_source=inet["source"],
        litdata=d["litdata"],
        readers=table(
            ["reader", "images / CPU-second", "images / s (wall)", "rounds (img / CPU-s)"],
            [
                [
                    k,
                    f"{r['img_per_cpu_s']:.0f}",
                    f"{r['img_per_s']:.0f}",
                    ", ".join(f"{v:.0f}" for v in r["rounds_img_per_cpu_s"]),
                ]
                for k, r in meas.items()
            ],
        ),  # fmt: skip
        ratio=f"{per_core['shards'] / per_core['ImageFolder']:.2f}",
        gpus=str(GPUS_PER_NODE),
        gpu_img_s=f"{gpu:.0f}",
        ref_model=ref["model"],
        ref_hardware=ref["hardware"],
        ref_source=ref["source"],
        node_img_s=f"{GPUS_PER_NODE * gpu:.0f}",
        workers=table(
            ["reader", "img/s per core", "workers per GPU", f"workers per {GPUS_PER_NODE}-GPU node"],
            [[k, f"{v:.0f}", str(workers_needed(v, gpu, 1)), str(workers_needed(v, gpu))] for k, v in per_core.items()],
        ),  # fmt: skip
    )
