"""Attention with a position bias: dense-bias SDPA against FlexAttention, per bias scheme and grid (JSON only).

    python -m benchmarks.attention --out docs/attention.json   # CUDA, bf16: ViT-S/16 heads at 224, 384, 512 px
    python -m benchmarks.attention --quick --out /tmp/attention.json   # CPU smoke test: forward only, seconds

For each scheme and image size, one block's attention of a ViT-S/16 (6 heads of 64): q, k, v of a batch, and the
bias the scheme gives block 0 on that grid (a learned one with its gradient). Two kernels, the same inputs:
``sdpa`` (the bias a dense mask; the memory-efficient kernel on CUDA) and ``flex`` (FlexAttention, the bias read by a
``score_mod``, and the scheme's block mask where it masks), each timed forward and forward + backward, round-robin.
Each row also records how far the flex output is from the dense one. The crossover (the smallest size at which flex
is faster) is what ``vitpos.attention.FLEX_FROM_TOKENS`` is set from.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Callable

import torch

from benchmarks.common import repeat, round_robin, write_record
from vitpos.attention import attention, attention_kernel
from vitpos.config import MODEL_PRESETS
from vitpos.model import create_model

SCHEMES = ("relbias", "cpb", "alibi2d", "lookhere")
KERNELS = ("sdpa", "flex")


def qkv(model: torch.nn.Module, batch: int, a: argparse.Namespace, grad: bool) -> list[torch.Tensor]:
    """q, k, v (B, heads, N, d) for ``model``'s grid in the benchmark's dtype, seeded: both kernels take the same."""
    heads = model.blocks[0].attn.num_heads
    n, d = model.grid[0] * model.grid[1], model.blocks[0].attn.head_dim
    g = torch.Generator(device=a.device).manual_seed(0)
    return [torch.randn(batch, heads, n, d, device=a.device, generator=g, dtype=a.dtype).requires_grad_(grad)
            for _ in range(3)]  # fmt: skip


def call(q, k, v, pos, kernel: str, backward: bool) -> Callable[[], torch.Tensor]:
    """One attention call on ``kernel`` (forward, or forward and backward of its sum)."""

    def run() -> torch.Tensor:
        with attention_kernel(kernel), contextlib.nullcontext() if backward else torch.no_grad():
            out = attention(q, k, v, pos.bias, block_mask=pos.block_mask)
            if backward:
                out.float().sum().backward(retain_graph=True)
        return out

    return run


def bench(scheme: str, img: int, batch: int, a: argparse.Namespace) -> list[dict]:
    """Both kernels on one block's attention of ``scheme`` at ``img`` px: block 0's bias as the model builds it under
    each kernel (a masking scheme's block mask is there for flex only), a learned bias with its gradient."""
    torch.manual_seed(0)
    model = create_model(scheme, img_size=img, patch_size=a.patch_size, num_classes=10, **MODEL_PRESETS[a.model])
    model = model.to(a.device)
    rows = []
    for direction in ["forward"] + (["forward+backward"] if a.backward else []):
        backward = direction != "forward"
        q, k, v = qkv(model, batch, a, backward)
        fns, outs = {}, {}
        for kernel in KERNELS:
            with attention_kernel(kernel), torch.set_grad_enabled(backward):
                pos = model.pos.attn_pos(model.grid, torch.device(a.device))[0]
            fns[kernel] = call(q, k, v, pos, kernel, backward)
            outs[kernel] = fns[kernel]().float()  # first call: compiles the flex kernel
        for fn in fns.values():
            repeat(fn, a.warmup, a)()
        seconds = round_robin({k: repeat(fn, a.steps, a) for k, fn in fns.items()}, a.repeats)
        ms = {k: [1e3 * s / a.steps for s in v] for k, v in seconds.items()}
        row = {"scheme": scheme, "img_size": img, "tokens": q.shape[-2], "batch": batch, "direction": direction,
               **{f"{k}_ms": v for k, v in ms.items()},
               "max_abs_diff": (outs["flex"] - outs["sdpa"]).abs().max().item()}  # fmt: skip
        rows.append(row)
        speed = statistics.median(ms["sdpa"]) / statistics.median(ms["flex"])
        print(f"  {scheme} {img} px {direction}: flex {speed:.2f}x sdpa", file=sys.stderr)
    return rows


def crossovers(rows: list[dict]) -> list[dict]:
    """Per scheme and direction: the smallest size at which flex's median time is below SDPA's and stays below at
    every larger size measured (None: never)."""
    out = []
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        for direction in dict.fromkeys(r["direction"] for r in rows):
            mine = sorted((r for r in rows if r["scheme"] == scheme and r["direction"] == direction),
                          key=lambda r: r["img_size"])  # fmt: skip
            faster = [statistics.median(r["flex_ms"]) < statistics.median(r["sdpa_ms"]) for r in mine]
            at = next((r["img_size"] for i, r in enumerate(mine) if all(faster[i:])), None)
            out.append({"scheme": scheme, "direction": direction, "flex_from_img_size": at})
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--model", choices=list(MODEL_PRESETS), default="small", help="size preset (its heads and width)")
    p.add_argument("--patch-size", type=int, default=16)
    p.add_argument("--img-sizes", type=int, nargs="+", default=[224, 384, 512])
    p.add_argument("--batch-size", type=int, nargs="+", default=[128, 64, 32], help="one value, or one per size")
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    p.add_argument("--repeats", type=int, default=5, help="round-robin rounds")
    p.add_argument("--steps", type=int, default=10, help="timed calls per kernel per round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out", required=True, help="JSON to write")
    p.add_argument("--quick", action="store_true", help="CPU smoke test: tiny sizes, fp32, forward only (seconds)")
    if "--quick" in argv:
        p.set_defaults(device="cpu", model="micro", patch_size=4, img_sizes=[16, 32], batch_size=[2], repeats=2,
                       steps=1, warmup=1)  # fmt: skip
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device: FlexAttention is timed on CUDA (--quick runs the CPU smoke test)")
    if len(a.batch_size) not in (1, len(a.img_sizes)) or any(i % a.patch_size for i in a.img_sizes):
        p.error("image sizes must be multiples of the patch size, and --batch-size one value or one per size")
    batches = a.batch_size * len(a.img_sizes) if len(a.batch_size) == 1 else a.batch_size
    a.dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    a.backward = a.device == "cuda"  # FlexAttention has no CPU backward
    setup = {"device": a.device, "dtype": str(a.dtype).removeprefix("torch."), "model": a.model,
             "dims": MODEL_PRESETS[a.model], "patch_size": a.patch_size, "repeats": a.repeats, "steps": a.steps,
             "warmup": a.warmup, "quick": a.quick}  # fmt: skip
    rows = []
    for img, batch in zip(a.img_sizes, batches, strict=True):  # smallest first: a run cut short keeps those
        for scheme in a.schemes:
            rows += bench(scheme, img, batch, a)
            write_record(a.out, "attention.py", argv, **setup, rows=rows, crossovers=crossovers(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
