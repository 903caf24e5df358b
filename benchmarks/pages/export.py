"""docs/export.md: the exported ONNX file under onnxruntime against eager PyTorch, per scheme and size, from
docs/export.json; docs/performance.md carries the same section."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages.common import fields, fill, measured_line, table


def folded_line(rows: list[dict]) -> str | None:
    """What `string` costs at inference once folded: its ONNX file against `rope2d`'s (benchmarks/export.py)."""
    if not rows:
        return None
    ratios = ", ".join(f"{r['img_size']} px {r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})" for r in rows)
    return (f"`string` is exported folded (P moved into the q and k projections, a rope2d graph): its ONNX file "
            f"against `rope2d`'s, timed in one round-robin, runs at {ratios} times `rope2d`'s speed (median of "
            "per-round ratios, lowest-highest).")  # fmt: skip


def section(d: dict) -> str:
    """The table of benchmarks/export.py with how it was measured."""
    m = d["model"]
    rows = [[f"`{r['scheme']}`", str(r["img_size"]), f"{r['eager_img_s']:.0f}", f"{r['onnxruntime_img_s']:.0f}",
             f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})", f"{r['max_rel_diff']:.1e}"]
            for r in d["rows"]]  # fmt: skip
    return fill(
        "export_section.md",
        folded=folded_line(d.get("folded", [])),
        measured=measured_line(d),
        **fields(m, "embed_dim", "depth", "num_heads", "patch_size", "img_size"),
        **fields(d, "threads", "batch", "repeats", "steps", "onnxruntime"),
        table=table(["scheme", "px", "eager img/s", "onnxruntime img/s", "onnxruntime / eager", "max rel. diff"], rows),
    )


def render(d: dict, folder: Path) -> str:
    return fill("export.md", section=section(d))
