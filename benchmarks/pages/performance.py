"""docs/performance.md: training throughput against timm per grid (benchmarks/throughput.py), the `shapes` rendering
rate, and CPU inference under onnxruntime (docs/export.json) where measured, from docs/performance.json."""

from __future__ import annotations

from pathlib import Path
from statistics import median

from benchmarks.pages import export
from benchmarks.pages.common import anchors, fields, fill, label, measured_line, per_round, read, spread, table

TIMM = {"learned": "`VisionTransformer`", "rope2d": "`vit_small_patch16_rope_224` (an `Eva`, RoPE-Axial)",
        "relbias": "`VisionTransformerRelPos(rel_pos_type='bias')`",
        "rope2d-mixed": "`vit_small_patch16_rope_mixed_224` (an `Eva`, RoPE-Mixed)",
        "lookhere": "`VisionTransformer` (timm has no LookHere: the plain ViT, no position cost)"}  # fmt: skip


def steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def model_line(d: dict) -> str:
    """The model, dtype, device and rounds of a timed benchmark (this page and docs/performance_compile.md)."""
    m = d["dims"]
    return fill(
        "performance_model.md",
        model=d["model"],
        **fields(m, "embed_dim", "depth", "num_heads"),
        patch_size=str(d["patch_size"]),
        dtype=d["dtype"],
        device=d["gpu"] or "the CPU",
        threads=str(d["threads"]),
        compiled=", every contender under `torch.compile`" if d.get("compiled") else "",
        warmup=steps(d["warmup"]),
        repeats=str(d["repeats"]),
        steps=steps(d["steps"]),
    ).rstrip("\n")


def throughput_rows(c: dict, matmul: float, spec: float | None) -> list[list[str]]:
    """One row per contender of a grid: img/s, against timm and `none` per round, memory, FLOPs, fraction of peak."""
    rows = []
    for name, r in c.items():
        timm, ours = c.get(r.get("counterpart", f"timm:{name}")), not name.startswith("timm:")
        over, rope = None, None  # step-time overheads per round, in %
        if ours and name != "none" and "none" in c:
            over = [100 * (x - 1) for x in per_round(c["none"]["img_s"], r["img_s"])]
        if ours and name != "rope2d" and "rope2d" in c:
            rope = [100 * (x - 1) for x in per_round(c["rope2d"]["img_s"], r["img_s"])]
        tflops = 3 * r["gflops_fwd"] * median(r["img_s"]) / 1e3
        rows.append([label(*name.partition(":")[::2]) if ours else name.replace(":", " "), f"{median(r['img_s']):.1f}",
                     spread(per_round(r["img_s"], timm["img_s"]), ".3f") if timm else "—",
                     spread(over, "+.1f") + " %" if over else "—", spread(rope, "+.1f") + " %" if rope else "—",
                     f"{r['memory_mib']:.0f}", f"{r['gflops_fwd']:.4g}",
                     f"{tflops:.3g}", f"{100 * tflops / matmul:.1f} %",
                     *([f"{100 * tflops / spec:.1f} %"] if spec else [])])  # fmt: skip
    return rows


def timed_against_timm(scheme: str, d: dict) -> bool:
    """Whether a grid of the record has ``scheme`` and its timm counterpart."""
    return any(scheme in c and c[scheme].get("counterpart", f"timm:{scheme}") in c
               for c in (g["contenders"] for g in d["grids"]))  # fmt: skip


def render(d: dict, folder: Path) -> str:
    """Training throughput from benchmarks/throughput.py; CPU inference under onnxruntime from
    ``folder``/export.json (benchmarks/export.py) where there is one."""
    peaks, measured = anchors()["gpu_peak_tflops"], read(folder / "export.json")
    spec = next((v[d["dtype"]] for k, v in peaks.items() if k != "source" and k in (d["gpu"] or "")), None)
    heads = ["model", "img/s", "vs timm", "overhead vs `none`", "vs `rope2d`", "step memory (MiB)", "GFLOPs/img (fwd)",
             "achieved TFLOP/s", "of measured peak", *(["of datasheet"] if spec else [])]  # fmt: skip
    grids, shapes = [], []
    for g in d["grids"]:
        side, rate = g["img_size"] // d["patch_size"], g["shapes_img_s"]
        ours = [r["img_s"] for n, r in g["contenders"].items() if not n.startswith("timm:")]
        train = max(median(v) for v in ours)  # the fastest scheme
        rows = throughput_rows(g["contenders"], d["matmul_peak_tflops"], spec)
        grid = {"side": str(side), "tokens": str(side * side), "img_size": str(g["img_size"]), "batch": str(g["batch"])}
        grids.append(fill("performance_grid.md", **grid, table=table(heads, rows)))
        shapes.append([f"{g['img_size']} px", f"{rate:.0f}", f"{train:.0f}", f"{rate / train:.1f}x"])
    return fill(
        "performance.md",
        measured=measured_line(d),
        model=model_line(d),
        matmul=f"{d['matmul_peak_tflops']:.3g}",
        datasheet=f" and the datasheet's {spec} TFLOP/s ({peaks['source']})" if spec else "",
        timm=d["timm"],
        timm_models="; ".join(f"`{k}` against {v}" for k, v in TIMM.items() if timed_against_timm(k, d)),
        quick="" if d["quick"] else None,
        grids="\n".join(grids),
        data_images=str(d["data_images"]),
        shapes=table(["size", "rendered img/s", "training img/s", "ratio"], shapes),
        inference=fill("performance_export.md", section=export.section(measured)) if measured else None,
    )
