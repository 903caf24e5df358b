"""CPU inference img/s of the exported ONNX file under onnxruntime against eager PyTorch (JSON only).

    python -m benchmarks.export --threads 1 --batch-size 16 --steps 1 --repeats 3   # docs/export.json
    python -m benchmarks.pages                                                      # docs/export.md

One ONNX file per scheme (``vitpos.export``, dynamic height and width), timed at every size against eager. Where
both are measured, `string`'s file (exported folded: P moved into the q and k projections) is also timed against
`rope2d`'s in one round-robin: what the learned rotation costs at inference.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnxruntime as ort
import torch

from benchmarks.common import ROOT, round_robin, write_record
from vitpos import create_model
from vitpos.export import export_program, relative_difference, write_onnx


def open_session(path: Path, a: argparse.Namespace) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = a.threads, 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def measure(pos: str, a: argparse.Namespace, folder: Path) -> list[dict]:
    torch.manual_seed(0)
    model = create_model(pos).eval()
    t0 = time.perf_counter()
    path = write_onnx(export_program(model, dynamic=True), folder / f"{pos}.onnx")
    export_s = time.perf_counter() - t0
    session = open_session(path, a)
    name = session.get_inputs()[0].name
    rows = []
    for size in a.img_sizes:
        x = torch.randn(a.batch_size, 3, size, size)
        with torch.inference_mode():
            fns = {"eager": lambda x=x: model(x), "onnxruntime": lambda x=x: session.run(None, {name: x.numpy()})[0]}
            diff = relative_difference(torch.from_numpy(fns["onnxruntime"]()), fns["eager"]())  # also a warm-up
            secs = round_robin({k: lambda f=f: [f() for _ in range(a.steps)] for k, f in fns.items()}, a.repeats)
        ratio = [e / o for e, o in zip(secs["eager"], secs["onnxruntime"], strict=True)]
        n = a.steps * a.batch_size
        rows.append({"scheme": pos, "img_size": size, "batch": a.batch_size, "max_rel_diff": diff, "export_s": export_s,
                     **{f"{k}_img_s": statistics.median(n / t for t in v) for k, v in secs.items()},
                     "ratio": statistics.median(ratio), "ratio_min": min(ratio), "ratio_max": max(ratio)})  # fmt: skip
        print(f"{pos} {size} px: onnxruntime / eager x{rows[-1]['ratio']:.2f}, diff {diff:.1e}", flush=True)
    return rows


def folded_against(a: argparse.Namespace, folder: Path, pos: str = "string", base: str = "rope2d") -> list[dict]:
    """Per size: img/s of ``pos``'s ONNX file against ``base``'s, timed in one round-robin (both written by
    :func:`measure` into ``folder``); ratio = base's seconds / pos's, 1 where folding leaves nothing to pay."""
    sessions = {k: open_session(folder / f"{k}.onnx", a) for k in (pos, base)}
    rows = []
    for size in a.img_sizes:
        x = torch.randn(a.batch_size, 3, size, size).numpy()
        fns = {k: lambda s=s, x=x: [s.run(None, {s.get_inputs()[0].name: x}) for _ in range(a.steps)]
               for k, s in sessions.items()}  # fmt: skip
        for f in fns.values():
            f()  # warm-up
        secs = round_robin(fns, a.repeats)
        ratio = [b / t for t, b in zip(secs[pos], secs[base], strict=True)]
        rows.append({"scheme": pos, "against": base, "img_size": size, "ratio": statistics.median(ratio),
                     "ratio_min": min(ratio), "ratio_max": max(ratio)})  # fmt: skip
        print(f"{pos} (folded) against {base} {size} px: x{rows[-1]['ratio']:.2f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", nargs="+", default=["learned", "sincos2d", "rope2d", "relbias", "none", "string"])
    p.add_argument("--img-sizes", nargs="+", type=int, default=[32, 64])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=3, help="batches per round")
    p.add_argument("--repeats", type=int, default=5, help="rounds per side")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "docs" / "export.json"))
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    dims = ("embed_dim", "depth", "num_heads", "patch_size", "img_size")
    model = {k: v.default for k, v in inspect.signature(create_model).parameters.items() if k in dims}
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for pos in a.schemes for r in measure(pos, a, Path(tmp))]
        folded = folded_against(a, Path(tmp)) if {"string", "rope2d"} <= set(a.schemes) else []
    write_record(a.out, "export.py", argv, onnxruntime=ort.__version__, model=model, batch=a.batch_size,
                 steps=a.steps, repeats=a.repeats, threads=a.threads, rows=rows, folded=folded)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
