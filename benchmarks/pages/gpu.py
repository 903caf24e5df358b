"""docs/gpu.md: what one run of .ci/gpu_check.sh measured, from gpu.json (benchmarks/gpu.py) and the records beside
it: gpu_performance.json, gpu_performance_compiled.json and gpu_performance_compiled_more.json
(benchmarks/throughput.py, eager and ``--compiled``; the check compiles at 224 px first), gpu_attention.json
(benchmarks/attention.py). Named apart from the CPU's records, they go into docs/ beside them."""

from __future__ import annotations

from pathlib import Path
from statistics import median

from benchmarks.pages.common import anchors, fill, label, measured_line, pct, per_round, read, spread, table
from benchmarks.pages.performance import model_line


def part_rows(parts: list[dict]) -> list[list[str]]:
    def outcome(p: dict) -> str:
        if p["timed_out"]:
            return f"ran out of time ({p['limit']:.0f} s)"
        return "finished" if p["rc"] == 0 else f"failed (exit {p['rc']})"

    return [[p["name"], outcome(p), f"{p['seconds']:.0f}", f"{p['limit']:.0f}"] for p in parts]


def tests_text(parts: list[dict]) -> str:
    runs = [p for p in parts if p.get("junit")]
    if not runs:
        return "No CUDA test ran."
    out = []
    for p in runs:
        j = p["junit"]
        out.append(f"`{p['name']}`: {j['passed']} passed, {len(j['failed'])} failed, {j['skipped']} skipped of "
                   f"{j['tests']}.")  # fmt: skip
        out += [f"- failed: `{name}`" for name in j["failed"]]
    return "\n".join(out)


def datasheet_peak(d: dict) -> float | None:
    """The bf16 dense peak of the record's device, from docs/anchors.yaml (None where it is not listed)."""
    peaks = anchors()["gpu_peak_tflops"]
    return next((v["bf16"] for k, v in peaks.items() if k != "source" and k in (d.get("gpu") or "")), None)


def throughput_table(eager: dict | None, compiled: dict | None) -> str:
    """One row per size and scheme: img/s, vs timm, memory and MFU, eager and (where measured) compiled."""
    records = {k: r for k, r in (("eager", eager), ("compiled", compiled)) if r}
    if not records:
        return "Not measured."
    rows = []
    peak = datasheet_peak(next(iter(records.values())))
    sizes = sorted({g["img_size"] for r in records.values() for g in r["grids"]})
    for size in sizes:
        grids = {k: next((g for g in r["grids"] if g["img_size"] == size), None) for k, r in records.items()}
        schemes = dict.fromkeys(n for g in grids.values() if g for n in g["contenders"] if not n.startswith("timm:"))
        for name in schemes:
            row = [f"{size} px", label(*name.partition(":")[::2])]
            for mode in ("eager", "compiled"):
                g = grids.get(mode)
                c = g["contenders"].get(name) if g else None
                if c is None:
                    row += ["—"] * 4
                    continue
                timm = g["contenders"].get(c.get("counterpart", f"timm:{name}"))
                mfu = 3 * c["gflops_fwd"] * 1e9 * median(c["img_s"]) / (peak * 1e12) if peak else None
                row += [f"{median(c['img_s']):.0f}", spread(per_round(c["img_s"], timm["img_s"]), ".2f") if timm
                        else "—", f"{c['memory_mib']:.0f}", f"{pct(mfu)} %" if mfu is not None else "—"]  # fmt: skip
            rows.append(row)
    heads = ["size", "scheme"] + [f"{m} {h}" for m in ("eager", "compiled")
                                  for h in ("img/s", "vs timm", "MiB", "MFU")]  # fmt: skip
    return table(heads, rows)


def attention_blocks(d: dict | None) -> dict[str, str | None]:
    """The attention section's blocks: its setup, table and crossovers (None: left out where nothing was measured)."""
    keys = ("model", "heads", "head_dim", "patch", "dtype", "device", "repeats", "steps", "warmup")
    if not d:
        return {"attention": "Not measured.", "crossovers": None} | {f"att_{k}": None for k in keys}
    m = d["dims"]
    rows = [[f"`{r['scheme']}`", f"{r['img_size']} px ({r['tokens']} tokens)", str(r["batch"]), r["direction"],
             f"{median(r['sdpa_ms']):.3f}", f"{median(r['flex_ms']):.3f}",
             spread(per_round(r["sdpa_ms"], r["flex_ms"]), ".2f"), f"{r['max_abs_diff']:.2g}"]
            for r in d["rows"]]  # fmt: skip
    heads = ["scheme", "size", "batch", "direction", "SDPA ms", "flex ms", "flex speed-up", "max diff"]
    cross = [f"- `{c['scheme']}` {c['direction']}: " + (f"FlexAttention from {c['flex_from_img_size']} px up"
             if c["flex_from_img_size"] else "SDPA at every size measured") for c in d["crossovers"]]  # fmt: skip
    values = (d["model"], m["num_heads"], m["embed_dim"] // m["num_heads"], d["patch_size"], d["dtype"], d["device"],
              d["repeats"], d["steps"], d["warmup"])  # fmt: skip
    return {"attention": table(heads, rows), "crossovers": "\n".join(cross)} | {
        f"att_{k}": str(v) for k, v in zip(keys, values, strict=True)
    }


def fashion_mnist_text(runs: list[dict]) -> str:
    if not runs:
        return "Not run."
    done = [r for r in runs if r["finished"]]
    out = [f"{len(done)} of {len(runs)} runs finished (`configs/fashion_mnist_gpu.yaml`)."]
    sizes = sorted({s["resolution"] for r in done for s in r["sweep"]})
    rows = []
    for r in done:
        methods = dict.fromkeys(s["method"] for s in r["sweep"])
        for method in methods or [None]:
            cells = {s["resolution"]: s["top1"] for s in r["sweep"] if s["method"] == method}
            rows.append([f"`{r['pos']}`", str(r["epochs"]), pct(r["test_top1"]), f"`{method}`" if method else "—",
                         *(pct(cells[s]) if s in cells else "—" for s in sizes)])  # fmt: skip
    heads = ["scheme", "epochs", "test top-1 (28 px)", "method", *(f"val {s} px" for s in sizes)]
    out.append(table(heads, rows))
    return "\n\n".join(out)


def render(d: dict, folder: Path) -> str:
    eager, compiled = read(folder / "gpu_performance.json"), read(folder / "gpu_performance_compiled.json")
    more = read(folder / "gpu_performance_compiled_more.json")  # the larger sizes, compiled where time was left
    if compiled and more:
        compiled = compiled | {"grids": compiled["grids"] + more["grids"]}
    timed = eager or compiled
    peak = datasheet_peak(timed) if timed else None
    return fill(
        "gpu.md",
        measured=measured_line(d | {"command": d["check"]}),  # the check, not its last bookkeeping call
        parts=table(["part", "outcome", "seconds", "limit (s)"], part_rows(d["parts"])),
        tests=tests_text(d["parts"]),
        model=model_line(timed) if timed else "",
        peak=f"{peak:g} TFLOP/s, {anchors()['gpu_peak_tflops']['source']}" if peak else "not listed for this device",
        throughput=throughput_table(eager, compiled),
        **attention_blocks(read(folder / "gpu_attention.json")),
        fashion_mnist=fashion_mnist_text(d["fashion_mnist"]),
    )
