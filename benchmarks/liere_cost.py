"""What LieRE's matrix exponentials cost against rope2d: forward + backward time per training batch (JSON only).

    python benchmarks/liere_cost.py          # docs/liere_cost.json
    python benchmarks/render.py              # docs/liere_cost.md

The Config default model at 8x8 and 16x16 tokens. Contenders: ``rope2d`` (fixed rotation), ``rope2d-mixed``
(learned 2D frequencies), ``liere`` with dense blocks (the head width) and smaller ones. A step is zero_grad +
forward + backward of a cross-entropy loss in fp32 on the CPU; "position" is the scheme's own per-step work
alone (every block's rotation, and its backward when learned). Contenders take turns, medians over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

import torch
from common import ROOT, round_robin, write_record  # noqa: E402  (benchmarks/ is on sys.path as a script)

import vitpos
from vitpos.config import Config

CONTENDERS = {  # label -> (scheme, pos_kwargs)
    "rope2d": ("rope2d", {}),
    "rope2d-mixed": ("rope2d-mixed", {}),
    "liere (b = 32, dense)": ("liere", {}),
    "liere (b = 8)": ("liere", {"block_size": 8}),
    "liere (b = 2)": ("liere", {"block_size": 2}),
}


def build(scheme: str, pos_kwargs: dict, img: int) -> vitpos.ViT:
    m = Config().model
    return vitpos.create_model(scheme, img_size=img, patch_size=m.patch_size, embed_dim=m.embed_dim, depth=m.depth,
                               num_heads=m.num_heads, num_classes=8, pos_kwargs=pos_kwargs).train()  # fmt: skip


def step_fn(model: vitpos.ViT, img: int, batch: int) -> Callable[[], None]:
    x, y = torch.randn(batch, 3, img, img), torch.randint(0, 8, (batch,))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    return step


def position_fn(model: vitpos.ViT) -> Callable[[], None]:
    pos, grid = model.pos, model.grid

    def step() -> None:
        pos.zero_grad(set_to_none=True)
        parts = [t for a in pos.attn_pos(grid) for t in (a.rope, a.rotation) if t is not None]
        total = torch.stack([t.sum() for t in parts]).sum()
        if total.requires_grad:
            total.backward()

    return step


def timed(fns: dict[str, Callable[[], None]], rounds: int, steps: int) -> dict[str, float]:
    """Median over rounds of the mean seconds per call, after one warm-up call each."""
    for fn in fns.values():
        fn()
    secs = round_robin({k: lambda fn=fn: [fn() for _ in range(steps)] for k, fn in fns.items()}, rounds)
    return {k: statistics.median(v) / steps for k, v in secs.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grids", nargs="+", type=int, default=[8, 16], help="token grid sides (patch 4)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=2, help="steps per contender per round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "docs" / "liere_cost.json"))
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    records = []
    for side in a.grids:
        img = side * Config().model.patch_size
        models = {label: build(s, kw, img) for label, (s, kw) in CONTENDERS.items()}
        step = timed({k: step_fn(m, img, a.batch) for k, m in models.items()}, a.rounds, a.steps)
        pos = timed({k: position_fn(m) for k, m in models.items()}, a.rounds, a.steps)
        for label, m in models.items():
            records.append({"grid": [side, side], "contender": label, "scheme": CONTENDERS[label][0],
                            "pos_kwargs": CONTENDERS[label][1], "step_ms": 1e3 * step[label],
                            "position_ms": 1e3 * pos[label],
                            "position_params": sum(t.numel() for t in m.pos.parameters())})  # fmt: skip
            print(f"{side}x{side} {label:24s} step {1e3 * step[label]:8.1f} ms  position {1e3 * pos[label]:7.2f} ms")
    m = Config().model
    dims = {"embed_dim": m.embed_dim, "depth": m.depth, "num_heads": m.num_heads, "patch_size": m.patch_size}
    write_record(a.out, "liere_cost.py", argv, dims=dims, batch=a.batch, rounds=a.rounds, steps=a.steps,
                 threads=a.threads, records=records)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
