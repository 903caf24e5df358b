"""Training-step throughput of vitpos's position schemes against timm's model of the same size (JSON only).

    python -m benchmarks.throughput --repeats 3 --steps 1 --warmup 1 --batch-size 32 --data-images 256
                                                        # docs/performance.json: CPU, tiny model, 8x8 and 16x16
    python -m benchmarks.throughput --compile --grids 8 --eval-img-sizes 32 48 64 --repeats 3
                                                        # docs/performance_compile.json: torch.compile vs eager
    python -m benchmarks.throughput --quick --out /tmp/performance.json   # smoke test, seconds

    python -m benchmarks.throughput --device cuda --dtype bf16 --model small --img-sizes 224 384 512 \
        --schemes learned rope2d relbias rope2d-mixed lookhere [--compiled] --out OUT.json   # ViT-S/16 on a GPU

Per grid every contender (the schemes, and timm's counterpart of each: ``VisionTransformer`` for `learned`, RoPE
``Eva`` for `rope2d`, its mixed-RoPE form for `rope2d-mixed`, the relpos ViT for `relbias`; a scheme timm has no
model of, such as `lookhere`, is set beside timm's plain ViT) is warmed up, then all run round-robin, ``--repeats``
rounds of ``--steps`` training steps: img/s per round, the peak memory of one step, the forward FLOPs per image.
``--compiled`` times every contender under ``torch.compile`` instead. Also: a square matmul (the machine's peak as
measured; docs/anchors.yaml has the datasheet's) and the rate at which the `shapes` set renders.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from timm.models.vision_transformer_relpos import VisionTransformerRelPos
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import ROOT, repeat, round_robin, run_specs, write_record
from vitpos.config import MODEL_PRESETS
from vitpos.data.shapes import render_shapes
from vitpos.model import create_model

NUM_CLASSES = 10
SCHEMES = (
    "learned",
    "sincos2d",
    "rope2d",
    "relbias",
    "none",
    "rope2d-mixed",
    "alibi2d",
    "lookhere",
    "rope2d-norm",
    "liere",
    "fire",
    "string",
    "pape",
)
# each scheme's counterpart in timm: its own model where timm has one, else timm's plain ViT (no position cost)
TIMM = {"learned": "timm:learned", "rope2d": "timm:rope2d", "relbias": "timm:relbias",
        "rope2d-mixed": "timm:rope2d-mixed", "lookhere": "timm:learned"}  # fmt: skip


def build(name: str, img: int, a: argparse.Namespace) -> torch.nn.Module:
    """A vitpos scheme (POS, or POS:STEM for another stem than the patch one), or ``timm:<scheme>``: timm's
    counterpart, same dims, average pooling, no class token."""
    dims = dict(MODEL_PRESETS[a.model], img_size=img, patch_size=a.patch_size, num_classes=NUM_CLASSES)
    if not name.startswith("timm:"):
        pos, _, stem = name.partition(":")
        return create_model(pos, stem=stem or "patch", **dims)
    kw = dict(dims, global_pool="avg", class_token=False)
    if name == "timm:learned":
        return VisionTransformer(**kw)
    if name in ("timm:rope2d", "timm:rope2d-mixed"):
        arch = "vit_small_patch16_rope_224" if name == "timm:rope2d" else "vit_small_patch16_rope_mixed_224"
        return timm.create_model(arch, pretrained=False, init_values=None, **kw)
    return VisionTransformerRelPos(rel_pos_type="bias", init_values=None, **kw)


def amp(a: argparse.Namespace) -> contextlib.AbstractContextManager:
    return torch.autocast(a.device, dtype=torch.bfloat16) if a.dtype == "bf16" else contextlib.nullcontext()


def trainer(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, a: argparse.Namespace) -> Callable[[], None]:
    """One training step of ``model`` on (x, y), its own AdamW."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=a.device == "cuda" or None)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with amp(a):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


def step_memory_mib(step, a: argparse.Namespace) -> float:
    """Peak memory of one step above the resting state (weights, gradients and AdamW state held): CUDA's peak
    allocation, or on the CPU the peak RSS (VmHWM) reset through /proc/self/clear_refs, minus the RSS before."""
    gc.collect()
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed pages back to the system: the resting size

    def kib(key: str) -> int:
        return next(int(s.split()[1]) for s in Path("/proc/self/status").read_text().splitlines() if s.startswith(key))

    base = kib("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    step()
    return (kib("VmHWM:") - base) / 1024


def forward_gflops(model: torch.nn.Module, x: torch.Tensor, a: argparse.Namespace) -> float:
    """Forward GFLOPs per image; SDPA on its math path, whose matmuls FlopCounterMode sees (fused kernels hide)."""
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), amp(a), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() / x.shape[0] / 1e9


def matmul_peak_tflops(a: argparse.Namespace) -> float:
    """Best of a few timed loops of one square torch.mm in the benchmark's dtype."""
    n = 8192 if a.device == "cuda" else 2048
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m1, m2 = (torch.randn(n, n, device=a.device, dtype=dtype) for _ in range(2))
    loop = repeat(lambda: torch.mm(m1, m2), 2 if a.quick else 8, a)
    loop()
    return 2 * n**3 * (2 if a.quick else 8) / min(round_robin({"mm": loop}, 4)["mm"]) / 1e12


def bench_grid(img: int, batch: int, a: argparse.Namespace) -> dict:
    names = list(dict.fromkeys(a.schemes + [TIMM[k] for k in a.schemes if k in TIMM]))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, img, img, generator=g).to(a.device)
    y = torch.randint(0, NUM_CLASSES, (batch,), generator=g).to(a.device)
    models = {}
    missing = []
    for n in names:
        torch.manual_seed(0)
        try:
            models[n] = build(n, img, a).to(a.device).train()
        except RuntimeError as e:  # an older timm without that model: the row says so
            if not n.startswith("timm:"):
                raise
            missing.append(f"{n}: {e}")
            continue
        if a.compiled:
            models[n] = torch.compile(models[n])
    steps = {n: trainer(m, x, y, a) for n, m in models.items()}
    for step in steps.values():
        repeat(step, a.warmup, a)()
    seconds = round_robin({n: repeat(s, a.steps, a) for n, s in steps.items()}, a.repeats)
    out = {}
    for n, m in models.items():
        out[n] = {"img_s": [a.steps * batch / t for t in seconds[n]], "memory_mib": step_memory_mib(steps[n], a),
                  "gflops_fwd": forward_gflops(getattr(m, "_orig_mod", m), x[:1], a),
                  **({"counterpart": TIMM[n]} if TIMM.get(n) in models else {})}  # fmt: skip
        print(f"  {img} px {n:14s} img/s {' '.join(f'{v:.1f}' for v in out[n]['img_s'])}", file=sys.stderr)
    render_shapes(8, img, img, 0)  # warm-up
    t0 = time.perf_counter()
    render_shapes(a.data_images, img, img, 1)
    rate = a.data_images / (time.perf_counter() - t0)
    return {"img_size": img, "batch": batch, "contenders": out, "shapes_img_s": rate,
            **({"missing": missing} if missing else {})}  # fmt: skip


def bench_compile(img: int, batch: int, a: argparse.Namespace) -> list[dict]:
    """Per scheme: a training step at ``img``, then the same model in evaluation at every ``--eval-img-sizes``,
    eager against ``torch.compile(dynamic=False)`` (one static graph per resolution)."""
    rows = []
    for scheme in a.schemes:
        torch._dynamo.reset()  # a fresh recompile budget per model
        torch.manual_seed(0)
        model = build(scheme, img, a).to(a.device).train()
        compiled = torch.compile(model, dynamic=False)
        x = torch.randn(batch, 3, img, img, device=a.device)
        y = torch.randint(0, NUM_CLASSES, (batch,), device=a.device)
        # two optimizers over the same weights: both sides train the one model
        cases = [("train", img, trainer(model, x, y, a), trainer(compiled, x, y, a))]
        for side in a.eval_img_sizes:
            xe = torch.randn(batch, 3, side, side, device=a.device)
            fwd = [lambda m=m, xe=xe: m(xe) for m in (model, compiled)]
            cases.append(("eval", side, *fwd))
        for mode, side, eager, comp in cases:
            model.train(mode == "train")
            with torch.no_grad() if mode == "eval" else contextlib.nullcontext(), amp(a):
                t0 = time.perf_counter()
                repeat(comp, 1, a)()  # compilation included
                first = time.perf_counter() - t0
                repeat(comp, a.warmup, a)()
                repeat(eager, a.warmup, a)()
                t = round_robin({"eager": repeat(eager, a.steps, a), "compiled": repeat(comp, a.steps, a)}, a.repeats)
            rows.append({"scheme": scheme, "mode": mode, "grid": side // a.patch_size, "first_call_s": first,
                         **{f"{k}_img_s": [a.steps * batch / s for s in v] for k, v in t.items()}})  # fmt: skip
            print(f"  compile {scheme} {mode} {side} px: first call {first:.1f} s", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = autocast, fp32 weights")
    p.add_argument("--model", choices=list(MODEL_PRESETS), default="tiny", help="size preset")
    p.add_argument("--patch-size", type=int, help="default 4 on cpu, 16 on cuda")
    p.add_argument("--grids", type=int, nargs="+", default=[8, 16], help="token grid sides")
    p.add_argument("--img-sizes", type=int, nargs="+", help="image sides in px; overrides --grids")
    p.add_argument("--batch-size", type=int, nargs="+", default=[64], help="one value, or one per size")
    p.add_argument(
        "--schemes",
        nargs="+",
        default=list(SCHEMES),
        metavar="POS[:STEM]",
        help="schemes, each with the patch stem or the one named (none:conv)",
    )
    p.add_argument("--repeats", type=int, default=5, help="round-robin rounds")
    p.add_argument("--steps", type=int, default=3, help="timed steps per contender per round")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps per contender")
    p.add_argument("--data-images", type=int, default=512, help="images rendered to time `shapes`")
    p.add_argument("--compile", action="store_true", help="measure torch.compile against eager instead")
    p.add_argument("--compiled", action="store_true", help="every contender under torch.compile")
    p.add_argument("--eval-img-sizes", type=int, nargs="+", help="--compile's eval sizes (default: the last size)")
    p.add_argument("--out", help="JSON to write (default docs/performance.json, with --compile *_compile.json)")
    p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test (seconds)")
    if "--quick" in argv:  # defaults that run in seconds; flags given still win
        p.set_defaults(model="micro", grids=[2, 4], batch_size=[8], repeats=2, steps=1, warmup=1, data_images=32)
    a = p.parse_args(argv)
    a.patch_size = a.patch_size or (16 if a.device == "cuda" else 4)
    a.img_sizes = a.img_sizes or [g * a.patch_size for g in a.grids]
    a.batch_size = a.batch_size * len(a.img_sizes) if len(a.batch_size) == 1 else a.batch_size
    a.eval_img_sizes = a.eval_img_sizes or a.img_sizes[-1:]
    a.schemes = list(dict.fromkeys(a.schemes))
    run_specs(p, [s if ":" in s else f"{s}:patch" for s in a.schemes])
    if any(i % a.patch_size for i in a.img_sizes) or len(a.batch_size) != len(a.img_sizes):
        p.error("image sizes must be multiples of the patch size, and --batch-size one value or one per size")
    name = "performance_compile" if a.compile else "performance"
    out = a.out or ROOT / "docs" / f"{name}.json"
    setup = {"device": a.device, "dtype": a.dtype, "model": a.model, "dims": MODEL_PRESETS[a.model],
             "patch_size": a.patch_size, "num_classes": NUM_CLASSES, "repeats": a.repeats, "steps": a.steps,
             "warmup": a.warmup, "threads": torch.get_num_threads(), "timm": timm.__version__,
             "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None, "quick": a.quick,
             "compiled": a.compiled}  # fmt: skip
    if a.compile:
        write_record(out, "throughput.py", argv, **setup, rows=bench_compile(a.img_sizes[-1], a.batch_size[-1], a))
        return 0
    peak = matmul_peak_tflops(a)
    grids = []
    for img, batch in zip(a.img_sizes, a.batch_size, strict=True):  # a run cut short keeps the grids it finished
        grids.append(bench_grid(img, batch, a))
        write_record(out, "throughput.py", argv, **setup, matmul_peak_tflops=peak, data_images=a.data_images,
                     grids=grids)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
