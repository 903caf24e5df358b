"""Training-step throughput of every vitpos position scheme, against timm's model of the same size.

What one run measures, all in the same process so that ratios compare like with like:

* img/s of a training step (forward + backward + AdamW step) per contender: each vitpos scheme
  and timm's counterpart of the same dims (``VisionTransformer`` for `learned`, the RoPE-Axial
  ``Eva`` for `rope2d`, ``VisionTransformerRelPos`` for `relbias`);
* ratio vitpos / timm, and overhead of each scheme against `none`;
* peak memory of one step, FLOPs per image (``FlopCounterMode``), achieved FLOP/s and its
  fraction of this machine's matmul peak, measured in the same run;
* the rate at which the embedded `shapes` data set renders images, against training's img/s;
* with ``--compile``: torch.compile's steady-state speed-up per scheme, training and eval.

Method: every contender is built and warmed up, then the contenders run round-robin
(A, B, C, ..., then reversed) for ``--repeats`` rounds of ``--steps`` steps each. The table gives
the median of the per-round img/s; a ratio is the median of per-round ratios, so slow drift
(thermal, other load) hits both sides equally.

    python benchmarks/throughput.py --quick                          # smoke test, seconds
    python benchmarks/throughput.py --repeats 8 --write docs/performance.md   # CPU, tiny model, 8x8 and 16x16
    python benchmarks/throughput.py --device cuda --dtype bf16 --model small --patch-size 16 \\
        --img-sizes 224 256 512 --batch-size 256 256 128             # ViT-S/16 on a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import gc
import os
import platform
import shlex
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import timm  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402
from timm.models.vision_transformer_relpos import VisionTransformerRelPos  # noqa: E402

from vitpos.attention import attention  # noqa: E402
from vitpos.config import MODEL_PRESETS  # noqa: E402
from vitpos.model import create_model  # noqa: E402
from vitpos.pos import POS_SCHEMES  # noqa: E402

NUM_CLASSES = 10
ISSUE_SCHEMES = ("learned", "sincos2d", "rope2d", "relbias", "none")  # the ones the targets name
# Dense peak of the matrix units by the vendor's datasheet (TFLOP/s), for MFU against the spec.
SPEC_PEAK_TFLOPS = {("H200", "bf16"): 989.0, ("H100", "bf16"): 989.0, ("H200", "fp32"): 67.0, ("H100", "fp32"): 67.0}
# Targets of the issue: vitpos / timm >= 1.0; overhead against `none` at most this fraction.
RATIO_TARGET = 1.0
OVERHEAD_TARGET = {"learned": 0.05, "sincos2d": 0.05, "rope2d": 0.10, "relbias": 0.10}
DATA_RATE_TARGET = 10.0

TIMM_DESCRIPTION = {
    "learned": "`timm.models.vision_transformer.VisionTransformer(global_pool='avg', class_token=False)`: "
    "learned absolute table, no LayerScale",
    "rope2d": "`timm.create_model('vit_small_patch16_rope_224', pretrained=False, ...)`, an `Eva` with "
    "RoPE-Axial (attn_type='rope', rope_type='cat', rope_temperature=100, grid indexing 'xy', "
    "no absolute table), dims overridden, `class_token=False, global_pool='avg', init_values=None` (no LayerScale)",
    "relbias": "`timm.models.vision_transformer_relpos.VisionTransformerRelPos(rel_pos_type='bias', "
    "class_token=False, global_pool='avg', init_values=None)`: a Swin-style bias table per block, "
    "gathered in every block",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- contenders ----------------------------------------------------------------------------------


def build_timm(scheme: str, img: int, patch: int, dims: dict[str, int]) -> nn.Module:
    common = dict(img_size=img, patch_size=patch, num_classes=NUM_CLASSES, global_pool="avg", class_token=False)
    if scheme == "learned":
        return VisionTransformer(**common, **dims)
    if scheme == "rope2d":
        return timm.create_model("vit_small_patch16_rope_224", pretrained=False, init_values=None, **common, **dims)
    if scheme == "relbias":
        return VisionTransformerRelPos(rel_pos_type="bias", init_values=None, **common, **dims)
    raise ValueError(scheme)


def timm_has(scheme: str) -> bool:
    """Whether this timm has the counterpart (its RoPE ViTs arrived in timm 1.0.18 or so)."""
    ok = scheme != "rope2d" or timm.is_model("vit_small_patch16_rope_224")
    if not ok:
        log(f"timm {timm.__version__} has no vit_small_patch16_rope_224: rope2d runs without a timm counterpart")
    return ok


@dataclass
class Contender:
    name: str  # "learned" or "timm:learned"
    model: nn.Module
    opt: torch.optim.Optimizer
    ips: list[float] = field(default_factory=list)  # img/s per round
    mem_mib: float = float("nan")
    gflops_fwd: float = float("nan")  # per image

    @property
    def median(self) -> float:
        return statistics.median(self.ips) if self.ips else float("nan")


def make_opt(model: nn.Module, device: torch.device) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=device.type == "cuda" or None)


def autocast(device: torch.device, dtype: str):
    if dtype == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model: nn.Module, opt, x, y, amp: Callable) -> None:
    opt.zero_grad(set_to_none=True)
    with amp():
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


def timed(fn: Callable[[], None], n: int, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync(device)
    return time.perf_counter() - t0


def round_robin(fns: list[Callable[[], None]], rounds: int, steps: int, device: torch.device) -> list[list[float]]:
    """Seconds per round for each fn, run A, B, C, ... then C, B, A, ... so order effects cancel."""
    out: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            out[i].append(timed(fns[i], steps, device))
    return out


def per_round(a: list[float], b: list[float]) -> list[float]:
    """a[r] / b[r] for each round: both sides of a ratio were timed in the same round (the table gives the median)."""
    return [x / y for x, y in zip(a, b)]


# -- memory, FLOPs, peak ----------------------------------------------------------------------------


def _proc_status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _trim_heap() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed pages back, so the baseline is the resting size


def step_memory_mib(step: Callable[[], None], device: torch.device) -> float:
    """Peak memory one training step needs above the resting state (params, grads, AdamW state held).

    CUDA: torch.cuda.max_memory_allocated. CPU: the process's peak RSS (VmHWM, which
    resource.getrusage's ru_maxrss also reports) after resetting it through /proc/self/clear_refs,
    minus the RSS before the step; without that reset the value is a plain ru_maxrss delta, which
    only shows a step that sets a new process-wide peak.
    """
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    _trim_heap()
    try:
        base = _proc_status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
        step()
        return (_proc_status_kib("VmHWM") - base) / 1024
    except (OSError, KeyError):
        import resource

        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        step()
        return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024


def forward_gflops(model: nn.Module, x: torch.Tensor, amp: Callable) -> float:
    """Forward GFLOPs per image. SDPA runs its math path here so attention's matmuls are counted
    (the fused CPU kernel is invisible to FlopCounterMode)."""
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), amp(), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() / x.shape[0] / 1e9


def matmul_peak_tflops(device: torch.device, dtype: str, seconds: float) -> float:
    """Best of several timed loops of one large square torch.mm in the benchmark's dtype."""
    n = 8192 if device.type == "cuda" else 2048
    tdtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    a = torch.randn(n, n, device=device, dtype=tdtype)
    b = torch.randn(n, n, device=device, dtype=tdtype)
    timed(lambda: torch.mm(a, b), 2, device)  # warm-up
    per = timed(lambda: torch.mm(a, b), 1, device)
    iters = max(1, int(seconds / 4 / max(per, 1e-6)))
    best = min(timed(lambda: torch.mm(a, b), iters, device) / iters for _ in range(4))
    return 2 * n**3 / best / 1e12


# -- machine facts --------------------------------------------------------------------------------


def machine_facts(device: torch.device) -> list[tuple[str, str]]:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    facts = [
        ("CPU", cpu),
        ("cores", f"{os.cpu_count()} logical, {usable} usable by this process"),
        ("torch threads", str(torch.get_num_threads())),
        ("load average (1, 5, 15 min) at start", ", ".join(f"{v:.2f}" for v in os.getloadavg())),
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        ("timm", timm.__version__),
    ]
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        facts.append(("GPU", f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"))
    return facts


# -- report helpers -------------------------------------------------------------------------------


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(v: float, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if v != v else f"{v:{spec}}{suffix}"  # NaN -> "-"


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


@dataclass
class Target:
    """One target of the issue as measured: the median, the per-round spread, the goal and the verdict."""

    name: str
    measured: str
    goal: str
    verdict: str
    rounds: list[float] = field(default_factory=list)  # per-round values, in the unit of ``goal_value``
    goal_value: float = float("nan")
    spec: str = ".3f"  # how a per-round value is printed

    @property
    def spread(self) -> str:
        return f"{min(self.rounds):{self.spec}} to {max(self.rounds):{self.spec}}" if self.rounds else "-"

    @property
    def straddles_goal(self) -> bool:
        """Some rounds meet the goal and some miss it: the gap is within this run's round-to-round variation."""
        return bool(self.rounds) and min(self.rounds) <= self.goal_value <= max(self.rounds)

    def row(self) -> list[str]:
        return [self.name, self.measured, self.spread, self.goal, self.verdict]


# -- the benchmark --------------------------------------------------------------------------------


@dataclass
class Settings:
    device: torch.device
    dtype: str
    model: str
    dims: dict[str, int]
    patch: int
    img_sizes: list[int]
    batch_sizes: list[int]
    schemes: list[str]
    timm_schemes: list[str]
    repeats: int
    steps: int
    warmup: int
    peak_seconds: float
    data_images: int
    eval_img_sizes: list[int]


def bench_grid(s: Settings, img: int, batch: int, peak: float) -> tuple[list[Contender], dict]:
    """Build all contenders at one image size, time them round-robin, then memory and FLOPs."""
    dev, amp = s.device, (lambda: autocast(s.device, s.dtype))
    contenders: list[Contender] = []
    for name in s.schemes + [f"timm:{k}" for k in s.timm_schemes]:
        torch.manual_seed(0)
        if name.startswith("timm:"):
            model = build_timm(name[5:], img, s.patch, s.dims)
        else:
            model = create_model(name, img_size=img, patch_size=s.patch, num_classes=NUM_CLASSES, **s.dims)
        model = model.to(dev).train()
        contenders.append(Contender(name, model, make_opt(model, dev)))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, img, img, generator=g).to(dev)
    y = torch.randint(0, NUM_CLASSES, (batch,), generator=g).to(dev)

    steps = [(lambda c=c: train_step(c.model, c.opt, x, y, amp)) for c in contenders]
    for c, step in zip(contenders, steps):
        t = timed(step, s.warmup, dev)
        log(f"  warm-up {c.name:14s} {s.warmup * batch / t:9.1f} img/s")
    seconds = round_robin(steps, s.repeats, s.steps, dev)
    for c, secs in zip(contenders, seconds):
        c.ips = [s.steps * batch / t for t in secs]
        log(f"  {c.name:14s} median {c.median:9.1f} img/s  rounds {' '.join(f'{v:.1f}' for v in c.ips)}")

    for c, step in zip(contenders, steps):
        c.mem_mib = step_memory_mib(step, dev)
        c.gflops_fwd = forward_gflops(c.model, x[:1], amp)

    by = {c.name: c for c in contenders}
    ratio_rounds = {k: per_round(by[k].ips, by[f"timm:{k}"].ips) for k in s.timm_schemes if k in by}
    # overhead = time per image / time per image of `none` - 1 = ips_none / ips - 1
    overhead_rounds = {
        c.name: [r - 1 for r in per_round(by["none"].ips, c.ips)]
        for c in contenders
        if "none" in by and c.name in POS_SCHEMES
    }
    return contenders, {
        "ratios": {k: statistics.median(v) for k, v in ratio_rounds.items()},
        "overheads": {k: statistics.median(v) for k, v in overhead_rounds.items()},
        "rounds": {**{f"ratio:{k}": v for k, v in ratio_rounds.items()}, **overhead_rounds},
        "peak": peak,
        "img": img,
        "batch": batch,
    }


def data_rate(s: Settings, img: int) -> float | None:
    """Images per second that vitpos.data.shapes.render_shapes produces at img x img, or None if absent."""
    try:
        from vitpos.data.shapes import render_shapes
    except ImportError:
        return None
    render_shapes(8, img, img, 0)  # warm-up
    n = s.data_images
    t0 = time.perf_counter()
    render_shapes(n, img, img, 1)
    return n / (time.perf_counter() - t0)


def eager_vs_compiled(s: Settings, eager: Callable[[], None], compiled: Callable[[], None], images: int, label):
    """One table row: first compiled call (s), eager and compiled img/s, paired speed-up."""
    first = timed(compiled, 1, s.device)  # compilation included
    timed(compiled, s.warmup, s.device)
    timed(eager, s.warmup, s.device)
    eager_s, comp_s = round_robin([eager, compiled], s.repeats, s.steps, s.device)
    n = s.steps * images
    row = [*label, f"{first:.1f}", fmt(statistics.median(n / t for t in eager_s), ".1f")]
    speedup = statistics.median(per_round(eager_s, comp_s))
    row += [fmt(statistics.median(n / t for t in comp_s), ".1f"), fmt(speedup, ".2f", "x")]
    log(f"  compile {' | '.join(row)}")
    return row


def compile_scheme(s: Settings, scheme: str, img: int, batch: int, eval_sizes: list[int]):
    """Training rows at ``img``; eval rows (the model built at ``img`` serving every eval size)."""
    dev, amp = s.device, (lambda: autocast(s.device, s.dtype))
    torch._dynamo.reset()  # a fresh recompile budget per model
    torch.manual_seed(0)
    model = create_model(scheme, img_size=img, patch_size=s.patch, num_classes=NUM_CLASSES, **s.dims)
    model = model.to(dev).train()
    compiled = torch.compile(model, dynamic=False)  # one static graph per resolution
    opt = make_opt(model, dev)  # shared: both sides train the same weights
    x = torch.randn(batch, 3, img, img, device=dev)
    y = torch.randint(0, NUM_CLASSES, (batch,), device=dev)
    grid = f"{img // s.patch}x{img // s.patch}"
    train_row = eager_vs_compiled(
        s,
        lambda: train_step(model, opt, x, y, amp),
        lambda: train_step(compiled, opt, x, y, amp),
        batch,
        [scheme, grid],
    )
    eval_rows = []
    model.eval()
    for side in eval_sizes:
        xe = torch.randn(batch, 3, side, side, device=dev)

        def fwd(m, xe=xe):
            with torch.no_grad(), amp():
                m(xe)

        label = [scheme, f"{side // s.patch}x{side // s.patch}"]
        eval_rows.append(eager_vs_compiled(s, lambda f=fwd: f(model), lambda f=fwd: f(compiled), batch, label))
    return train_row, eval_rows


def bench_compile(s: Settings) -> tuple[list[list[str]], list[list[str]]]:
    """Eager vs torch.compile per scheme: training at each size; eval across the eval sizes, served
    by the model built at the last training size (resolution transfer), at that size's batch."""
    train_rows, eval_rows = [], []
    for scheme in s.schemes:
        for i, (img, batch) in enumerate(zip(s.img_sizes, s.batch_sizes)):
            last = i == len(s.img_sizes) - 1
            row, rows = compile_scheme(s, scheme, img, batch, s.eval_img_sizes if last else [])
            train_rows.append(row)
            eval_rows += rows
            gc.collect()
    return train_rows, eval_rows


def position_checks(s: Settings, img: int) -> list[list[str]]:
    """Per scheme, what a forward does with position (not timed): which attention kernel each block runs, how
    often the scheme builds its per-grid tensors, and whether a parameter change reaches a cached evaluation."""
    import vitpos.attention as va

    big = img * 3 // 2 // s.patch * s.patch  # an unseen grid, where tables are resampled (and cached)
    rows = []
    for name in s.schemes:
        torch.manual_seed(0)
        m = create_model(name, img_size=img, patch_size=s.patch, num_classes=NUM_CLASSES, **s.dims).to(s.device)
        x, xb = torch.randn(2, 3, img, img, device=s.device), torch.randn(2, 3, big, big, device=s.device)
        seen: list[str] = []
        sdpa, learned = va.F.scaled_dot_product_attention, va.LearnedBiasAttention.apply

        def spy_sdpa(q, k, v, attn_mask=None, _sdpa=sdpa, _seen=seen, **kw):
            kernel = SDPBackend(int(torch._fused_sdp_choice(q, k, v, attn_mask))).name.lower()
            _seen.append(f"SDPA {kernel}, " + ("no mask" if attn_mask is None else f"{attn_mask.dim()}-D mask"))
            return _sdpa(q, k, v, attn_mask=attn_mask, **kw)

        def spy_learned(*args, _learned=learned, _seen=seen):
            _seen.append("vitpos learned-bias (flash forward)")
            return _learned(*args)

        va.F.scaled_dot_product_attention, va.LearnedBiasAttention.apply = spy_sdpa, spy_learned
        try:
            m.train()
            m(x).square().mean().backward()  # the first forward at a grid builds what it caches
            seen.clear()
            misses = m.pos.cache_misses
            m(x).square().mean().backward()
            train_builds, train_kernels = m.pos.cache_misses - misses, sorted(set(seen))
            seen.clear()
            m.eval()
            with torch.no_grad():
                m(xb)
                misses = m.pos.cache_misses
                before = m(xb)
                again, eval_kernels = m.pos.cache_misses - misses, sorted(set(seen))
                params = [q for q in m.pos.parameters() if q.requires_grad]
                fresh = "-"
                if params:
                    for q in params:
                        q.add_(0.01)  # in place, as an optimizer step changes it
                    after = m(xb)
                    m.eval()  # (re)setting the mode empties every cache: the reference is built from scratch
                    fresh = "yes" if torch.equal(after, m(xb)) and not torch.equal(after, before) else "NO"
        finally:
            va.F.scaled_dot_product_attention, va.LearnedBiasAttention.apply = sdpa, learned
        rows.append([
            f"`{name}`", "; ".join(train_kernels), "; ".join(eval_kernels), str(train_builds), str(again), fresh,
        ])  # fmt: skip
    return rows


# Calls that only describe or allocate tensors: left out when two models' operator lists are compared.
METADATA_OPS = {
    "view", "reshape", "permute", "transpose", "select", "unbind", "expand", "as_strided", "t", "slice",
    "unsqueeze", "squeeze", "flatten", "unflatten", "alias", "detach", "empty", "empty_like", "empty_strided",
    "_unsafe_view", "_reshape_alias", "lift_fresh", "resolve_conj", "resolve_neg", "result_type", "to",
    "_to_copy", "contiguous", "split", "chunk", "narrow", "zeros", "zeros_like", "ones_like", "fill_", "zero_",
}  # fmt: skip


def operator_difference(s: Settings, scheme: str, img: int) -> tuple[int, dict[str, tuple[int, int]]]:
    """Compute operators (aten, metadata left out) of one training step, vitpos `scheme` against its timm model:
    the vitpos call count and the operators whose counts differ (vitpos, timm). Batch 4, profiled once."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(4, 3, img, img, device=s.device)
    y = torch.randint(0, NUM_CLASSES, (4,), device=s.device)
    counts = []
    for model in (
        create_model(scheme, img_size=img, patch_size=s.patch, num_classes=NUM_CLASSES, **s.dims),
        build_timm(scheme, img, s.patch, s.dims),
    ):
        model = model.to(s.device).train()
        opt = make_opt(model, s.device)
        train_step(model, opt, x, y, contextlib.nullcontext)  # warm: lazy state is made outside the profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(model, opt, x, y, contextlib.nullcontext)
        names = [e.name for e in prof.events() if e.name.startswith("aten::")]
        counts.append(Counter(n for n in names if n[6:] not in METADATA_OPS))
    ours, theirs = counts
    diff = {n[6:]: (ours[n], theirs[n]) for n in sorted(set(ours) | set(theirs)) if ours[n] != theirs[n]}
    return sum(ours.values()), diff


def attention_cost(s: Settings, batch: int, tokens: int) -> dict[str, float]:
    """ms for one attention forward + backward at the benchmark's shape, q/k/v being views of one qkv
    projection as in the model: no bias; a learned bias through SDPA (its math path on the CPU);
    the same through ``vitpos.attention`` (fused forward, chunked backward). Round-robin, median."""
    heads, hd = s.dims["num_heads"], s.dims["embed_dim"] // s.dims["num_heads"]
    qkv = torch.randn(batch, tokens, 3 * heads * hd, device=s.device, requires_grad=True)
    table = torch.randn(heads, tokens, tokens, device=s.device, requires_grad=True)

    def case(fn) -> Callable[[], None]:
        def step() -> None:
            q, k, v = qkv.unflatten(-1, (3, heads, hd)).permute(2, 0, 3, 1, 4)
            fn(q, k, v).sum().backward()

        return step

    cases = {
        "no bias": case(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
        "SDPA": case(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=table * 1)),
        "vitpos": case(lambda q, k, v: attention(q, k, v, table * 1)),
    }
    for step in cases.values():
        step()
    seconds = round_robin(list(cases.values()), 5, 1, s.device)
    return {name: 1000 * statistics.median(t) for name, t in zip(cases, seconds)}


def miss_notes(s: Settings, targets: list[Target], batch: int) -> list[str]:
    """Why each missed target is missed, with the measurement that shows it (CPU runs)."""
    missed = [t for t in targets if t.verdict == "MISS"]
    if not missed:
        return []
    out = ["## Where a target is missed, and why", ""]
    for t in missed:
        if t.name.startswith("`relbias` overhead"):
            side = int(t.name.rsplit(" ", 2)[-2])
            c = attention_cost(s, batch, side)
            out.append(
                f"- {t.name}: a learned bias needs its own gradient, dS = P (dP - rowsum(dP P)) summed over the "
                "batch, an N x N quantity per image and head that no fused CPU kernel returns. vitpos runs the flash "
                "kernel forward and recomputes P in cache-sized chunks backward (`vitpos/attention.py`); SDPA "
                "falls back to its math path, which is what timm's relpos ViT pays. Measured now, one attention "
                f"forward + backward at this shape: no bias {c['no bias']:.0f} ms, learned bias via vitpos "
                f"{c['vitpos']:.0f} ms, via SDPA {c['SDPA']:.0f} ms."
            )
        elif t.name.startswith("`rope2d` overhead"):
            out.append(
                f"- {t.name}: rotating q and k is one complex multiply each, forward and backward, in every block: "
                "memory-bound work of the size of q and k, which none of the other schemes does per block."
            )
        elif t.name.startswith("data rate"):
            out.append(
                f"- {t.name}: `shapes` renders each split once per resolution and caches it, so training reads "
                "tensors; the rendering rate only matters for splits too large to cache (rendered per batch)."
            )
        if t.name.startswith("`learned` / timm"):
            g = int(t.name.rsplit("x", 1)[-1])
            total, diff = operator_difference(s, "learned", g * s.patch)
            listed = ", ".join(f"`{n}` {a} vs {b}" for n, a, b in ((n, *v) for n, v in diff.items())) or "none"
            out.append(
                f"- {t.name}: both are the same ViT. Profiled in this run, one training step of each calls the same "
                f"compute operators ({total} calls for vitpos, metadata-only calls left out) except: {listed} "
                "(vitpos vs timm; `dropout` with p = 0 returns its input)."
            )
        if t.straddles_goal:
            out.append(
                f"- {t.name}: the rounds span {t.spread}, on both sides of the goal ({t.goal}); the median's gap is "
                "smaller than this run's round-to-round variation, so this run cannot tell it from zero."
            )
    return out + [""] if len(out) > 2 else []


def close_calls(targets: list[Target]) -> list[str]:
    """Targets met by the median although some rounds missed them: a pass this run cannot tell from parity."""
    close = [t for t in targets if t.verdict == "PASS" and t.straddles_goal]
    if not close:
        return []
    out = ["## Met, but within round-to-round variation", ""]
    out += [f"- {t.name}: {t.measured} (rounds {t.spread}, goal {t.goal})." for t in close]
    return out + [
        "",
        "Some rounds of these missed the goal: another run on this machine may put the median on the other side.",
        "",
    ]


def compile_section(compile_rows) -> list[str]:
    train_rows, eval_rows = compile_rows
    headers = ["scheme", "grid", "first call (s)", "eager img/s", "compiled img/s", "speed-up"]
    return [
        "## torch.compile",
        "",
        "`torch.compile(model, dynamic=False)` (inductor) against eager, the same module, alternated after "
        "warm-up. First call = wall seconds of the first compiled call (compilation included); speed-up is "
        "steady state. Eval: the model built at the last training size serves every eval size (one static graph "
        "each, so a new resolution costs one more compilation).",
        "",
        "Training step:",
        "",
        md_table(headers, train_rows),
        "",
        "Eval forward (no_grad) across resolutions:",
        "",
        md_table(headers, eval_rows),
        "",
    ] + compile_summary(train_rows, eval_rows)


def compile_summary(train_rows: list[list[str]], eval_rows: list[list[str]]) -> list[str]:
    """Ranges read off the two tables, so the page's summary is this run's and not a hand-written one."""

    def column(rows: list[list[str]], i: int) -> list[float]:
        return [float(r[i].rstrip("x")) for r in rows if len(r) > i and r[i].rstrip("x").replace(".", "", 1).isdigit()]

    def span(v: list[float], spec: str) -> str:
        return f"{min(v):{spec}}-{max(v):{spec}}" if v else "-"

    schemes = sorted({r[0] for r in train_rows + eval_rows})
    grids = sorted({r[1] for r in eval_rows})
    new_res = [float(r[2]) for r in eval_rows if r[1] != eval_rows[0][1]] if eval_rows else []
    return [
        "Summary of this run:",
        "",
        f"- Compiled and run, training and evaluation at {len(grids)} grids from one model: {', '.join(schemes)} "
        "(tests/test_perf.py compiles every registry scheme with `fullgraph=True` under `-m slow`).",
        f"- Steady-state speed-up: training {span(column(train_rows, 5), '.2f')}x, evaluation "
        f"{span(column(eval_rows, 5), '.2f')}x. Compilation: first training call "
        f"{span(column(train_rows, 2), '.0f')} s, "
        f"first evaluation call at a grid {span(column(eval_rows, 2), '.0f')} s"
        + (f" ({span(new_res, '.0f')} s for the grids after the first)." if new_res else "."),
        "- Eager mode already hands the matrix multiplies, most of an fp32 step, to oneDNN/MKL "
        "([performance.md](performance.md) gives the fraction of matmul peak), so on a CPU compile can only fuse "
        "the remainder; speed-ups within a few per cent of 1.0 are within round-to-round variation.",
        "",
    ]


def compile_report(s: Settings, argv: list[str], compile_rows) -> str:
    """The page `--compile-only` writes: the command, the machine, the setup and the compile tables."""
    d = s.dims
    out = ["# Performance: torch.compile", "", "Generated by", "", "```"]
    out += ["python benchmarks/throughput.py " + shlex.join(argv), "```", ""]
    out += [f"Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}", ""]
    out += ["## Machine", "", md_table(["what", "value"], [[k, v] for k, v in machine_facts(s.device)]), ""]
    out += [
        f"Model `{s.model}` (embed_dim {d['embed_dim']}, depth {d['depth']}, heads {d['num_heads']}, patch {s.patch}), "
        f"batch {', '.join(map(str, s.batch_sizes))}, {s.dtype} on {s.device.type}; {s.repeats} alternated rounds of "
        f"{s.steps} steps after {s.warmup} warm-up steps. The eager tables are in [performance.md](performance.md).",
        "",
    ]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > len(os.sched_getaffinity(0)):
        out += [
            f"**The machine was busy** (load {load:.1f} on {len(os.sched_getaffinity(0))} cores): the img/s columns "
            "moved with the other work; the speed-up column, a median of ratios taken within the same round, is the "
            "figure to read.",
            "",
        ]
    return "\n".join(out + compile_section(compile_rows))


def report(s: Settings, argv: list[str], results, data_rows, compile_rows, spec_peak: float | None) -> str:
    dev = s.device
    out = ["# Performance", ""]
    out += ["Generated by `benchmarks/throughput.py`; rerun it to refresh this page.", ""]
    out += ["```", "python benchmarks/throughput.py " + shlex.join(argv), "```", ""]
    if "--quick" in argv:
        out += ["**Quick smoke-test settings: these numbers say the benchmark runs, not how fast anything is.**", ""]
    out += [f"Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}", ""]
    out += ["## Machine", "", md_table(["what", "value"], [[k, v] for k, v in machine_facts(dev)]), ""]
    d = s.dims
    n_tok = ", ".join(f"{(i // s.patch) ** 2}" for i in s.img_sizes)
    out += [
        "## Setup",
        "",
        f"- Model `{s.model}`: embed_dim {d['embed_dim']}, depth {d['depth']}, heads {d['num_heads']}, MLP ratio 4, "
        f"patch {s.patch}, global average pooling, no class token, {NUM_CLASSES} classes; "
        f"images {', '.join(f'{i} px' for i in s.img_sizes)} ({n_tok} tokens); "
        f"batch {', '.join(map(str, s.batch_sizes))}.",
        f"- Step: forward + cross-entropy + backward + AdamW ({'fused' if dev.type == 'cuda' else 'default'}), "
        f"{'fp32' if s.dtype == 'fp32' else 'bf16 autocast, fp32 weights'} on {dev.type}.",
        f"- Method: every contender built and warmed up ({s.warmup} steps), then run round-robin "
        f"(A, B, ... then reversed) for {s.repeats} rounds of {s.steps} steps; img/s is the median over rounds; "
        "ratios and overheads are medians of per-round ratios, both sides timed in the same round.",
        "- Memory: peak memory one step needs above the resting state (weights, gradients and AdamW state "
        + (
            "excluded), `torch.cuda.max_memory_allocated`."
            if dev.type == "cuda"
            else "excluded): the process's peak RSS (VmHWM, what `resource.getrusage` reports as ru_maxrss), "
            "reset through `/proc/self/clear_refs` before the step, minus the RSS before it (freed heap trimmed first)."
        ),
        "- FLOPs: `torch.utils.flop_counter.FlopCounterMode` on one forward (SDPA on its math path so attention "
        "is counted); a training step is taken as 3x forward. Achieved = 3 x forward FLOPs x img/s.",
        f"- Peak: a {8192 if dev.type == 'cuda' else 2048}^3 `torch.mm` loop in {s.dtype} measured in this run: "
        f"**{results[0][1]['peak']:.3g} TFLOP/s**"
        + (f"; MFU against the datasheet's dense {s.dtype} peak of {spec_peak:.0f} TFLOP/s." if spec_peak else "."),
        "",
        f"Compared against timm (same dims, patch, pooling, no class token; timm {timm.__version__}):",
        "",
    ]
    out += [f"- `{k}` vs {TIMM_DESCRIPTION[k]}" for k in s.timm_schemes]
    out += [""]

    targets: list[Target] = []
    for contenders, info in results:
        img, g = info["img"], info["img"] // s.patch
        out += [f"## {g}x{g} grid ({g * g} tokens, {img} px, batch {info['batch']})", ""]
        headers = ["model", "img/s", "vs timm", "overhead vs none", "step memory (MiB)", "GFLOPs/img (fwd)"]
        unit, per_t = ("TFLOP/s", 1.0) if dev.type == "cuda" else ("GFLOP/s", 1e3)
        headers += [f"achieved {unit}", "of measured peak"] + (["MFU (spec)"] if spec_peak else [])
        rows = []
        for c in contenders:
            tflops = 3 * c.gflops_fwd * c.median / 1e3
            ratio = info["ratios"].get(c.name, float("nan"))
            over = info["overheads"].get(c.name, float("nan"))
            label = f"timm {c.name[5:]}" if c.name.startswith("timm:") else f"vitpos `{c.name}`"
            row = [
                label,
                fmt(c.median, ".1f"),
                fmt(ratio, ".3f"),
                fmt(100 * over, "+.1f", " %") if c.name != "none" else "-",
            ]
            row += [
                fmt(c.mem_mib, ".0f"),
                fmt(c.gflops_fwd, ".4g"),
                fmt(tflops * per_t, ".1f"),
                fmt(100 * tflops / info["peak"], ".1f", " %"),
            ]
            if spec_peak:
                row.append(fmt(100 * tflops / spec_peak, ".1f", " %"))
            rows.append(row)
            if ratio == ratio:
                targets.append(Target(
                    f"`{c.name}` / timm, {g}x{g}", f"{ratio:.3f}", f">= {RATIO_TARGET:.2f}",
                    verdict(ratio >= RATIO_TARGET), info["rounds"][f"ratio:{c.name}"], RATIO_TARGET,
                ))  # fmt: skip
            if c.name in OVERHEAD_TARGET and over == over:
                lim = OVERHEAD_TARGET[c.name]
                targets.append(Target(
                    f"`{c.name}` overhead vs `none`, {g * g} tokens", f"{100 * over:+.1f} %", f"<= {100 * lim:.0f} %",
                    verdict(over <= lim), [100 * r for r in info["rounds"][c.name]], 100 * lim, "+.1f",
                ))  # fmt: skip
        out += [md_table(headers, rows), ""]

    out += ["## Embedded data set: generation rate vs training", ""]
    if data_rows is None:
        out += ["TODO: `vitpos.data.shapes.render_shapes(n, height, width, seed)` is not importable; not measured.", ""]
    else:
        out += [
            f"`render_shapes(n={s.data_images}, H, W, seed)` on the CPU in this process "
            f"({torch.get_num_threads()} threads), "
            "against the fastest vitpos scheme's training img/s at that size.",
            "",
        ]
        out += [
            md_table(["image size", "rendered img/s", "training img/s", "ratio", "target"], [r[:5] for r in data_rows]),
            "",
        ]
        goal = f">= {DATA_RATE_TARGET:.0f}x"
        targets += [Target(f"data rate / training rate, {r[0]}", r[3], goal, r[4]) for r in data_rows]

    if compile_rows is not None:
        out += compile_section(compile_rows)
    else:
        out += [
            "## torch.compile",
            "",
            "Measured separately (compilation on this CPU takes minutes per model): "
            "[performance_compile.md](performance_compile.md), made by `benchmarks/throughput.py --compile-only`.",
            "",
        ]

    grid = s.img_sizes[0] // s.patch
    out += [
        "## Position work per forward",
        "",
        f"Checked, not timed (batch 2): the attention kernel the blocks run (as `torch._fused_sdp_choice` reports "
        "it; `math` would be the unfused fallback); how many times the scheme built its per-grid tensors "
        f"(rotations, bias, resampled tables) in a second training forward at the {grid}x{grid} grid and in a second "
        "evaluation forward at an unseen 1.5x grid; and whether, after a learned position parameter is changed in "
        "place as an optimizer step does, the cached evaluation gives what a model built from scratch gives. "
        "Builds are counted by the scheme's cache (`cache_misses`): a training forward builds once (a fresh graph "
        "for a learned parameter) or not at all, never per block. The same properties are tests "
        "(tests/test_perf.py).",
        "",
        md_table(
            [
                "scheme",
                "attention kernel, training",
                "attention kernel, evaluation",
                "builds per training forward",
                "builds, 2nd eval forward",
                "fresh after a parameter change",
            ],
            position_checks(s, s.img_sizes[0]),
        ),  # fmt: skip
        "",
        "## Targets",
        "",
        "Measured: the median over rounds; rounds: the lowest and highest per-round value (overheads in %), "
        "which shows this machine's round-to-round variation.",
        "",
        md_table(["target", "measured", "rounds", "goal", "verdict"], [t.row() for t in targets]),
        "",
    ]
    if dev.type == "cpu":
        out += miss_notes(s, targets, s.batch_sizes[-1]) + close_calls(targets)
        out += [
            "## GPU",
            "",
            "Still to be measured: `benchmarks/gpu_check.sh` is the prepared run (bf16 ViT-S/16 at 224, 256 and 512 px "
            "against timm, with model FLOP utilisation, plus the CUDA-only tests), but no GPU machine was available to "
            "the session that wrote this page.",
            "",
        ]
    return "\n".join(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = autocast, fp32 weights")
    p.add_argument("--batch-size", type=int, nargs="+", help="one value, or one per grid (default 64; quick 8)")
    p.add_argument("--grids", type=int, nargs="+", help="token grid sides (default 8 16; quick 2 4)")
    p.add_argument("--img-sizes", type=int, nargs="+", help="image sides in px; overrides --grids")
    p.add_argument("--eval-img-sizes", type=int, nargs="+", help="--compile eval sizes (default: the image sizes)")
    p.add_argument("--model", choices=list(MODEL_PRESETS), help="size preset (default tiny; quick micro)")
    p.add_argument("--patch-size", type=int, help="default 4 on cpu, 16 on cuda")
    p.add_argument(
        "--schemes",
        nargs="+",
        choices=[*POS_SCHEMES, "all"],
        default=[n for n in ISSUE_SCHEMES if n in POS_SCHEMES],
        help=f"vitpos schemes to run (default: {' '.join(ISSUE_SCHEMES)}; 'all' = the whole registry)",
    )
    p.add_argument("--repeats", type=int, help="round-robin rounds (default 5; quick 2)")
    p.add_argument("--steps", type=int, help="timed steps per contender per round (default 3; quick 1)")
    p.add_argument("--warmup", type=int, help="warm-up steps per contender (default 2; quick 1)")
    p.add_argument("--data-images", type=int, help="images rendered to time the data set (default 512; quick 32)")
    p.add_argument("--peak-tflops", type=float, help="datasheet peak for MFU (default: known GPUs only)")
    p.add_argument("--compile", action="store_true", help="also measure torch.compile (slow to warm up on CPU)")
    p.add_argument("--compile-only", action="store_true", help="measure only torch.compile (its own report)")
    p.add_argument("--write", metavar="PATH", help="also write the markdown report to PATH")
    p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test (seconds)")
    args = p.parse_args(argv)
    q = args.quick
    args.model = args.model or ("micro" if q else "tiny")
    args.batch_size = args.batch_size or [8 if q else 64]
    args.grids = args.grids or ([2, 4] if q else [8, 16])
    args.repeats = args.repeats or (2 if q else 5)
    args.steps = args.steps or (1 if q else 3)
    args.warmup = args.warmup or (1 if q else 2)
    args.data_images = args.data_images or (32 if q else 512)
    args.patch_size = args.patch_size or (16 if args.device == "cuda" else 4)
    args.schemes = list(POS_SCHEMES) if "all" in args.schemes else list(dict.fromkeys(args.schemes))
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        log("--device cuda but torch.cuda.is_available() is False")
        return 2
    img_sizes = a.img_sizes or [g * a.patch_size for g in a.grids]
    bad = [i for i in img_sizes if i % a.patch_size]
    if bad:
        log(f"image sizes {bad} are not multiples of the patch size {a.patch_size}")
        return 2
    if len(a.batch_size) not in (1, len(img_sizes)):
        log(f"--batch-size takes one value or one per grid ({len(img_sizes)})")
        return 2
    batch_sizes = a.batch_size * len(img_sizes) if len(a.batch_size) == 1 else a.batch_size
    eval_sizes = a.eval_img_sizes or (img_sizes if len(img_sizes) > 1 else [img_sizes[0], 2 * img_sizes[0]])
    s = Settings(
        device=torch.device(a.device),
        dtype=a.dtype,
        model=a.model,
        dims=dict(MODEL_PRESETS[a.model]),
        patch=a.patch_size,
        img_sizes=img_sizes,
        batch_sizes=batch_sizes,
        schemes=a.schemes,
        timm_schemes=[k for k in ("learned", "rope2d", "relbias") if k in a.schemes and timm_has(k)],
        repeats=a.repeats,
        steps=a.steps,
        warmup=a.warmup,
        peak_seconds=0.5 if a.quick else 3.0,
        data_images=a.data_images,
        eval_img_sizes=eval_sizes,
    )
    if a.compile_only:
        log("torch.compile ...")
        return publish(compile_report(s, argv, bench_compile(s)), a.write)
    log(f"measuring the {a.dtype} matmul peak on {a.device} ...")
    peak = matmul_peak_tflops(s.device, a.dtype, s.peak_seconds)
    log(f"  {peak:.3f} TFLOP/s")
    spec = a.peak_tflops
    if spec is None and s.device.type == "cuda":
        name = torch.cuda.get_device_name(s.device)
        spec = next((v for (gpu, dt), v in SPEC_PEAK_TFLOPS.items() if gpu in name and dt == a.dtype), None)

    results, data_rows = [], []
    for img, batch in zip(img_sizes, batch_sizes):
        log(f"grid {img // a.patch_size}x{img // a.patch_size} ({img} px, batch {batch}) ...")
        contenders, info = bench_grid(s, img, batch, peak)
        results.append((contenders, info))
        rate = data_rate(s, img)
        if rate is None:
            data_rows = None
        elif data_rows is not None:
            train = max(c.median for c in contenders if not c.name.startswith("timm:"))
            ratio = rate / train
            data_rows.append(
                [f"{img} px", f"{rate:.0f}", f"{train:.0f}", f"{ratio:.1f}x", verdict(ratio >= DATA_RATE_TARGET)]
            )
            log(f"  data: {rate:.0f} img/s rendered vs {train:.0f} img/s trained ({ratio:.1f}x)")
        del contenders
        gc.collect()

    compile_rows = None
    if a.compile:
        log("torch.compile ...")
        try:
            compile_rows = bench_compile(s)
        except Exception:  # report, don't lose the eager results
            log(traceback.format_exc())
            compile_rows = ([["compile failed: see stderr", "", "", "", "", ""]], [])

    return publish(report(s, argv, results, data_rows, compile_rows, spec), a.write)


def publish(text: str, path: str | None) -> int:
    """Print the report and write it to ``path`` when given."""
    print(text)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
