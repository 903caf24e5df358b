"""Inference throughput of the exported ONNX file under onnxruntime against eager PyTorch, on the CPU.

For each scheme the default model (dim 192, depth 6, 3 heads, patch 4, trained grid 8x8) is exported once
with dynamic height and width (``vitpos.export``), and that one file is timed at every size. Eager
(``torch.inference_mode``) and onnxruntime run round-robin in the same process with the same number of
threads, ``--repeats`` rounds each; the table gives the median img/s and the median of per-round ratios,
so drift from other load hits both sides alike.

    python benchmarks/export.py --threads 1 --batch-size 16 --steps 1 --repeats 3 --write docs/export.md
    python benchmarks/export.py --quick                        # smoke test

Most of a run is the five exports (trace, ONNX conversion); the timed rounds are short.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import onnxruntime as ort  # noqa: E402

from vitpos import create_model  # noqa: E402
from vitpos.export import export_program, relative_difference, write_onnx  # noqa: E402

SCHEMES = ("learned", "sincos2d", "rope2d", "relbias", "none")


def timed(fn, x: torch.Tensor, steps: int) -> float:
    """img/s of ``steps`` calls of fn(x)."""
    start = time.perf_counter()
    for _ in range(steps):
        fn(x)
    return steps * x.shape[0] / (time.perf_counter() - start)


def measure(pos: str, sizes: list[int], batch: int, steps: int, repeats: int, threads: int, folder: Path) -> list[dict]:
    torch.manual_seed(0)
    model = create_model(pos).eval()
    t0 = time.perf_counter()
    path = write_onnx(export_program(model, dynamic=True), folder / f"{pos}.onnx")
    export_s = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def onnx_run(x: torch.Tensor):
        return session.run(None, {name: x.numpy()})[0]

    def eager_run(x: torch.Tensor):
        with torch.inference_mode():
            return model(x)

    rows = []
    for size in sizes:
        x = torch.randn(batch, 3, size, size)
        diff = relative_difference(torch.from_numpy(onnx_run(x)), eager_run(x))
        for fn in (eager_run, onnx_run):  # warm-up: caches, allocator, onnxruntime's shape inference
            timed(fn, x, 1)
        eager, onnx, ratio = [], [], []
        for r in range(repeats):
            order = [(eager_run, eager), (onnx_run, onnx)]
            for fn, out in order if r % 2 == 0 else order[::-1]:
                out.append(timed(fn, x, steps))
            ratio.append(onnx[-1] / eager[-1])
        rows.append({
            "scheme": pos, "img_size": size, "batch": batch,
            "eager_img_s": statistics.median(eager), "onnxruntime_img_s": statistics.median(onnx),
            "ratio": statistics.median(ratio), "ratio_min": min(ratio), "ratio_max": max(ratio),
            "max_rel_diff": diff, "export_s": export_s,
        })  # fmt: skip
        r = rows[-1]
        print(f"{pos:9s} {size:3d} px  eager {r['eager_img_s']:7.0f} img/s  onnxruntime {r['onnxruntime_img_s']:7.0f} "
              f"img/s  x{r['ratio']:.2f}  diff {diff:.1e}", flush=True)  # fmt: skip
    return rows


def render(result: dict) -> str:
    """The markdown page for one run's JSON."""
    env = result["env"]
    lines = [
        "# Exported ONNX under onnxruntime against eager PyTorch (CPU inference)",
        "",
        "One ONNX file per scheme, exported once with dynamic batch, height and width "
        "(`python -m vitpos.export`), timed at every size; eager is `torch.inference_mode()`. Both run in the "
        "same process, round-robin, with the same threads; img/s is the median over rounds, the ratio the "
        "median of per-round ratios (min-max in brackets). `max rel. diff` is max |onnxruntime - eager| / "
        "max |eager| of the logits.",
        "",
        f"Model: vitpos default (dim 192, depth 6, 3 heads, patch 4, trained at 32 px), random weights; "
        f"batch {result['batch']}, {result['threads']} thread(s), {result['repeats']} rounds of "
        f"{result['steps']} batches.",
        "",
        "| scheme | px | eager img/s | onnxruntime img/s | onnxruntime / eager | max rel. diff |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| `{r['scheme']}` | {r['img_size']} | {r['eager_img_s']:.0f} | {r['onnxruntime_img_s']:.0f} | "
            f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['max_rel_diff']:.1e} |"
        )
    lines += [
        "",
        f"torch {env['torch']}, onnxruntime {env['onnxruntime']}, {env['machine']}, 1-minute load average "
        f"{env['load_average'][0]} at the start and {env['load_average'][1]} at the end (other jobs shared the "
        f"machine: absolute img/s are below an idle machine's, the ratios are what compares); {result['date']}.",
        "",
        f"Made by `{result['command']}` (JSON: `{result['json']}`).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES))
    p.add_argument("--img-sizes", nargs="+", type=int, default=[32, 64])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=3, help="batches per round")
    p.add_argument("--repeats", type=int, default=5, help="rounds per side")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--write", help="markdown page to write (its JSON goes next to it)")
    p.add_argument("--quick", action="store_true", help="smoke test: two schemes, one size, one round")
    args = p.parse_args(argv)
    if args.quick:
        args.schemes, args.img_sizes, args.steps, args.repeats, args.batch_size = ["none", "rope2d"], [32], 1, 1, 4
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pos in args.schemes:
            rows += measure(pos, args.img_sizes, args.batch_size, args.steps, args.repeats, args.threads, Path(tmp))
    result = {
        "command": "python " + shlex.join(["benchmarks/export.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "batch": args.batch_size, "steps": args.steps, "repeats": args.repeats, "threads": args.threads,
        "env": {"torch": torch.__version__, "onnxruntime": ort.__version__,
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)]},
        "rows": rows,
    }  # fmt: skip
    if args.write:
        page = Path(args.write)
        result["json"] = str(page.with_suffix(".json"))
        page.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        page.write_text(render(result))
        print(f"wrote {page} and {result['json']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
