"""What LieRE's matrix exponentials cost against rope2d: forward + backward time per training batch.

    python benchmarks/liere_cost.py --write docs/liere_cost.md      # also writes docs/liere_cost.json

The model is the Config default (128 wide, 4 blocks, 4 heads of 32, patch 4) at 32 px (8x8 tokens) and
64 px (16x16). Contenders: ``rope2d`` (fixed rotation, built once), ``rope2d-mixed`` (learned 2D
frequencies), and ``liere`` with its default dense blocks (b = the head width, 32) and smaller blocks.
Every step is zero_grad + forward + backward of a cross-entropy loss in fp32 on the CPU; the contenders
take turns (round robin) so that a busy machine slows them alike, and the median over rounds is kept.
"Position" times the scheme's own per-step work alone: building the rotation for all blocks (and, for
learned schemes, its backward), the part that scales with tokens x depth x heads x b^3 for LieRE.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import vitpos
from vitpos.config import Config

ROOT = Path(__file__).resolve().parents[1]
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
        parts = [t for a in pos.attention(grid) for t in (a.rope, a.rotation) if t is not None]
        total = torch.stack([t.sum() for t in parts]).sum()
        if total.requires_grad:
            total.backward()

    return step


def round_robin(fns: dict[str, Callable[[], None]], rounds: int, steps: int) -> dict[str, float]:
    """Median over rounds of the mean seconds per call; every contender runs once per round."""
    for fn in fns.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            times[k].append((time.perf_counter() - t0) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grids", nargs="+", type=int, default=[8, 16], help="token grid sides (patch 4)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=2, help="steps per contender per round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--write", default=None, help="markdown page to write (the JSON goes beside it)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    records = []
    for side in args.grids:
        img = side * Config().model.patch_size
        models = {label: build(s, kw, img) for label, (s, kw) in CONTENDERS.items()}
        step = round_robin({k: step_fn(m, img, args.batch) for k, m in models.items()}, args.rounds, args.steps)
        pos = round_robin({k: position_fn(m) for k, m in models.items()}, args.rounds, args.steps)
        for label, m in models.items():
            records.append({
                "grid": [side, side], "contender": label, "scheme": CONTENDERS[label][0],
                "pos_kwargs": CONTENDERS[label][1], "batch": args.batch,
                "step_ms": 1e3 * step[label], "vs_rope2d": step[label] / step["rope2d"],
                "position_ms": 1e3 * pos[label],
                "position_params": sum(t.numel() for t in m.pos.parameters()),
            })  # fmt: skip
            print(f"{side}x{side} {label:24s} step {1e3 * step[label]:8.1f} ms  x{step[label] / step['rope2d']:.2f}"
                  f"  position {1e3 * pos[label]:7.2f} ms", flush=True)  # fmt: skip
    command = shlex.join(["python", "benchmarks/liere_cost.py", *(argv if argv is not None else sys.argv[1:])])
    facts = {"command": command, "date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(),
             "cores": len(os.sched_getaffinity(0)), "threads": args.threads, "torch": torch.__version__}  # fmt: skip
    if args.write:
        out = Path(args.write)
        out.with_suffix(".json").write_text(json.dumps({**facts, "records": records}, indent=1) + "\n")
        out.write_text(render(facts, records, args))
        print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


def render(facts: dict, records: list[dict], args) -> str:
    m = Config().model
    lines = [
        "# LieRE's cost against rope2d",
        "",
        f"Made by `{facts['command']}` on {facts['date']}: {facts['cpu']}, {facts['cores']} cores "
        f"({facts['threads']} thread), torch {facts['torch']}, fp32 on the CPU. Raw numbers: "
        "[liere_cost.json](liere_cost.json).",
        "",
        f"Model: the Config default ViT ({m.embed_dim} wide, {m.depth} blocks, {m.num_heads} heads of "
        f"{m.embed_dim // m.num_heads}, patch {m.patch_size}), batch {args.batch}. *Step*: zero_grad + forward + "
        "backward, median over rounds of round-robin timing. *Position*: the scheme's own work per training step "
        "(building every block's rotation, and its backward when it is learned).",
        "",
        "| grid | scheme | step (ms) | vs rope2d | position (ms) | position parameters |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(f"| {r['grid'][0]}x{r['grid'][1]} | `{r['contender']}` | {r['step_ms']:.1f} | "
                     f"{r['vs_rope2d']:.2f}x | {r['position_ms']:.2f} | {r['position_params']:,} |")  # fmt: skip
    lines += [
        "",
        "LieRE's position work is one matrix exponential per token, block, head and channel block: its cost grows "
        "with tokens x depth x heads x (d/b) x b^3 and, unlike rope2d's fixed table, it is redone every training "
        "step (the generators change); its backward is an exponential of a 2b x 2b matrix. Applying the rotation "
        "is a (b x b) product per token and channel block instead of rope2d's complex multiply. The cost does not "
        "grow with the batch, so a larger batch amortises it. In evaluation the rotations are built once per grid "
        "and cached, as rope2d's are.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
