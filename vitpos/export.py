"""Export a vitpos ViT for deployment: one ONNX file (or ExportedProgram) that serves every resolution.

```bash
python -m vitpos.export --ckpt CKPT --out model.onnx [--method NAME] [--resolutions R ...]
```

The model is traced once by ``torch.export`` with the batch, the height and the width dynamic (multiples
of the patch size), so the position scheme's per-grid tensors (resampled tables, rotation angles,
bias gathers) are computed inside the graph from the input's shape. The ONNX file comes from torch's
ONNX exporter (``torch.onnx.export(..., dynamo=True)``); no complex dtype reaches it, because q/k
rotation takes its real-valued form while tracing (``vitpos.pos.base.rotate``). Attention is traced as
matmul, softmax, matmul (``vitpos.attention.spelled_out``), which the exporter takes as it is.

Nothing is taken on trust: the ExportedProgram is run against eager PyTorch at the training size and at
two non-square grids on either side of it, and the ONNX file against vitpos with onnxruntime. A transfer
method whose graph depends on the grid itself (``relbias``'s ``geometric`` resize computes the table's
offsets in Python from the grid) fails that check; it is exported for fixed sizes instead, one file per size, and
the command says so. So is a model whose training grid is one patch on a side: torch.export specialises a
dimension of size one, and its graph would serve no grid but that one. What a scheme can fold into the weights is
folded first (``ViT.folded``: STRING's orthogonal maps into the q and k projections), and the checks compare the
folded export with the unfolded model.

The ONNX file checks its input as the eager model does: a height or width that is not a multiple of the patch size
fails (in onnxruntime, at a Reshape node named after the rule) instead of being floored by the patch convolution.
Each file records in its metadata that vitpos wrote it: ``--overwrite`` replaces only such a file, and a file that
is already at ``--out`` is kept unless it is asked. A file is written whole or not at all (a temporary file renamed
into place), so a full disk leaves the earlier file as it was.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.export import Dim, ExportedProgram

from .cli import OneLineParser
from .errors import ConfigError
from .model import ViT
from .outputs import check_creatable, shell, write_failed
from .resolution import parse_resolution, resolution_label, to_hw

RTOL = 1e-4  # accepted max |exported - eager| / max |eager| of the logits
MAX_GRID = 512  # largest token grid side a dynamic export accepts (8192 px at patch 16)
CHECK_BATCH = 2  # images per checked size (batch 1 is checked too, at the training size)
MARK = "vitpos"  # metadata key of every ONNX file vitpos.export writes


class NotDynamic(Exception):
    """The traced graph is specialised to the example grid (a guard on H or W), so it serves no other."""


@dataclass
class ExportReport:
    """What :func:`export_onnx` wrote and how it was checked."""

    scheme: str
    method: str
    dynamic: bool
    files: dict[str, Path]  # size label ("any", "32", "24x48") -> file
    checked: dict[str, float] = field(default_factory=dict)  # size label -> max relative difference
    reason: str = ""  # why the grid is fixed, when it is

    @property
    def max_rel_diff(self) -> float:
        return max(self.checked.values(), default=float("nan"))


def train_size(model: ViT) -> tuple[int, int]:
    """(H, W) in pixels of the grid the model was built for."""
    return model.grid[0] * model.patch_size, model.grid[1] * model.patch_size


def in_chans(model: ViT) -> int:
    return next(m for m in model.stem.modules() if isinstance(m, nn.Conv2d)).in_channels


def probe_sizes(model: ViT) -> list[tuple[int, int]]:
    """Sizes a dynamic export is checked at: the training size, and two non-square grids, each smaller
    than the trained one along one axis and larger along the other."""
    (gh, gw), p = model.grid, model.patch_size
    small, large = (lambda g: max(2, g // 2) * p), (lambda g: min(2 * g, MAX_GRID) * p)
    return [(gh * p, gw * p), (small(gh), large(gw)), (large(gh), small(gw))]


def relative_difference(out: Tensor, ref: Tensor) -> float:
    """max |out - ref| / max |ref|: one number per comparison, insensitive to the logits' scale."""
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-12))


def _images(model: ViT, size: tuple[int, int], batch: int = CHECK_BATCH) -> Tensor:
    g = torch.Generator().manual_seed(hash(size) % 2**31)
    return torch.randn(batch, in_chans(model), *size, generator=g)


def _check_size(model: ViT, size: tuple[int, int]) -> None:
    h, w = size
    if h <= 0 or w <= 0 or h % model.patch_size or w % model.patch_size:
        raise ConfigError(f"size {h}x{w} is not a positive multiple of the patch size {model.patch_size}")


def export_program(model: ViT, dynamic: bool = True, size: tuple[int, int] | None = None) -> ExportedProgram:
    """``torch.export`` the model (put in eval mode) and check the program against eager PyTorch.

    dynamic: batch, height and width are dynamic (multiples of the patch size, grids 2..MAX_GRID per side);
    the program is checked at :func:`probe_sizes`, and :class:`NotDynamic` is raised when its graph only
    serves the example grid. dynamic=False: only the batch is dynamic; the program serves ``size`` (H, W)
    (default: the training size) and is checked there.
    A check beyond ``RTOL`` raises RuntimeError.
    """
    model.eval()
    size = tuple(size) if size is not None else train_size(model)
    _check_size(model, size)
    batch = Dim("batch", min=1, max=1 << 16)
    dims: dict[int, object] = {0: batch}
    if dynamic:
        p = model.patch_size
        dims |= {2: p * Dim("grid_h", min=2, max=MAX_GRID), 3: p * Dim("grid_w", min=2, max=MAX_GRID)}
    example = _images(model, size)
    # what folds into the weights is folded (STRING's P into q and k); the checks below compare with the unfolded model
    program = torch.export.export(model.folded(), (example,), dynamic_shapes={"images": dims})
    sizes = probe_sizes(model) if dynamic else [size]
    runner = program.module()
    for i, hw in enumerate(sizes):
        for batch_size in (CHECK_BATCH, 1) if i == 0 else (CHECK_BATCH,):
            x = _images(model, hw, batch_size)
            try:
                with torch.no_grad():
                    out = runner(x)
            except AssertionError as e:  # a guard of the program: it was specialised to the example grid
                if not dynamic or "Guard failed" not in str(e):
                    raise
                guard = str(e).split("Guard failed:", 1)[1].strip().splitlines()[0]
                raise NotDynamic(guard) from None
            with torch.no_grad():
                ref = model(x)
            diff = relative_difference(out, ref)
            if not diff <= RTOL:
                raise RuntimeError(f"exported program differs from eager at {hw[0]}x{hw[1]}: {diff:.2e} > {RTOL:.0e}")
    return program


def _require_onnx(check: bool) -> None:
    missing = [m for m in ("onnx", "onnxscript", *(("onnxruntime",) if check else ())) if not _importable(m)]
    if missing:
        names = " ".join(missing)
        raise ConfigError(f"ONNX export needs {names}: pip install {names} (or the vitpos[export] extra)")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def complex_values(model_proto) -> list[str]:
    """Names of the inputs, outputs, initializers and intermediate values of complex type in an ONNX model."""
    import onnx

    complex_types = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}
    g = model_proto.graph
    values = [*g.input, *g.output, *g.value_info]
    found = [v.name for v in values if v.type.tensor_type.elem_type in complex_types]
    found += [t.name for t in g.initializer if t.data_type in complex_types]
    return found + [f"{n.op_type}:{n.name}" for n in g.node if "complex" in n.op_type.lower()]


def write_onnx(program: ExportedProgram, path: str | Path, *, patch_size: int | None = None) -> Path:
    """Convert an ExportedProgram (from :func:`export_program`) to an ONNX file; refuses complex values.

    ``patch_size``: the file refuses an image whose height or width is not a multiple of it (as the eager model
    does). The file is written whole or not at all; a failed write is a ConfigError and leaves ``path`` as it was."""
    import onnx

    path = Path(path)
    proto = torch.onnx.export(program, dynamo=True, verbose=False).model_proto
    found = complex_values(proto)
    if found:
        raise RuntimeError(f"complex values reached the ONNX graph: {found[:5]}")
    if patch_size is not None:
        refuse_other_sizes(proto, patch_size)
    proto.metadata_props.add(key=MARK, value="vitpos.export")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(proto, str(tmp))  # the edited proto (the program's own save would write the graph unedited)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        kept = f"{path} is as it was" if path.exists() else "nothing was written"
        raise write_failed(e, path, kept) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def refuse_other_sizes(proto, patch_size: int) -> None:
    """Make the ONNX graph ``proto`` fail on an image whose height or width is not a multiple of ``patch_size``.

    The traced graph takes H and W as multiples of the patch (its dynamic dimensions say so), but onnxruntime does
    not enforce that, and the patch convolution would floor any other size. ONNX has no assert: the check reshapes
    a one-element tensor to ``1 + H mod p + W mod p`` elements, which fails unless both remainders are zero, and
    adds zero times that element to the logits so that the node stays in the graph."""
    from onnx import TensorProto, helper

    graph = proto.graph
    image, logits = graph.input[0].name, graph.output[0].name
    unchecked = f"{logits}_unchecked"
    for node in graph.node:  # the node that made the logits now makes the unchecked ones
        node.output[:] = [unchecked if o == logits else o for o in node.output]
    rule = f"height_and_width_must_be_multiples_of_{patch_size}"

    def const(name: str, values: list, kind: int = TensorProto.INT64) -> None:
        graph.initializer.append(helper.make_tensor(name, kind, [len(values)], values))

    const("size_check_starts", [2])
    const("size_check_ends", [4])
    const("size_check_patch", [patch_size])
    const("size_check_one", [1])
    const("size_check_element", [0.0], TensorProto.FLOAT)
    graph.node.extend(
        [
            helper.make_node("Shape", [image], ["size_check_shape"]),
            helper.make_node("Slice", ["size_check_shape", "size_check_starts", "size_check_ends"], ["size_check_hw"]),
            helper.make_node("Mod", ["size_check_hw", "size_check_patch"], ["size_check_rest"]),
            helper.make_node("ReduceSum", ["size_check_rest"], ["size_check_sum"], keepdims=1),
            helper.make_node("Add", ["size_check_sum", "size_check_one"], ["size_check_count"]),
            helper.make_node("Reshape", ["size_check_element", "size_check_count"], ["size_check_ok"], name=rule),
            helper.make_node("ReduceSum", ["size_check_ok"], ["size_check_zero"], keepdims=0),
            helper.make_node("CastLike", ["size_check_zero", unchecked], ["size_check_zero_t"]),
            helper.make_node("Add", [unchecked, "size_check_zero_t"], [logits]),
        ]
    )


def _check_target(path: Path, overwrite: bool) -> None:
    """``path`` may be written: it is free, or (``overwrite``) an ONNX file vitpos wrote; its folder can be made."""
    check_creatable(path, folder=False)
    if path.exists():
        if not overwrite:
            raise ConfigError(f"{path} already exists; pass --overwrite to replace it, or another --out")
        if not written_here(path):
            raise ConfigError(f"{path} is not an ONNX file vitpos.export wrote; --overwrite replaces only those")


def written_here(path: Path) -> bool:
    """``path`` is an ONNX file whose metadata says vitpos.export wrote it."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - whatever the parser raises, the file is not one of ours
        return False
    return any(p.key == MARK for p in proto.metadata_props)


def check_onnx(path: str | Path, model: ViT, sizes: Sequence[tuple[int, int]]) -> dict[str, float]:
    """Run the ONNX file with onnxruntime at ``sizes`` and compare with the model: size label -> max rel. diff."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    result = {}
    for i, hw in enumerate(sizes):
        for batch_size in (CHECK_BATCH, 1) if i == 0 else (CHECK_BATCH,):
            x = _images(model, hw, batch_size)
            out = torch.from_numpy(session.run(None, {name: x.numpy()})[0])
            with torch.no_grad():
                ref = model(x)
            label = resolution_label(hw)
            result[label] = max(result.get(label, 0.0), relative_difference(out, ref))
    return result


def export_onnx(
    model: ViT,
    out: str | Path,
    *,
    method: str | None = None,
    resolutions: Sequence[tuple[int, int]] = (),
    check: bool = True,
    overwrite: bool = False,
) -> ExportReport:
    """Write ``out`` (dynamic batch, height and width), or, when the scheme's method cannot serve a dynamic
    grid, one file per size in ``resolutions`` (default: the training size) named ``out``'s stem + size.

    resolutions: (H, W) sizes; for a dynamic export they are checked in addition to :func:`probe_sizes`.
    check: compare each file with the model under onnxruntime (needs onnxruntime).
    overwrite: replace a file at ``out`` (or a fixed size's name) that vitpos.export wrote; without it an existing
    file is an error, and a file vitpos did not write always is.
    """
    _require_onnx(check)
    out = Path(out)
    _check_target(out, overwrite)
    model.eval()
    if method is not None:
        if method not in model.pos.methods:
            raise ConfigError(f"unknown method '{method}' for {_scheme(model)}; valid: {', '.join(model.pos.methods)}")
        model.pos.method = method
    for hw in resolutions:
        _check_size(model, hw)
    report = ExportReport(_scheme(model), model.pos.method, dynamic=True, files={})
    if min(model.grid) < 2:
        report.dynamic, report.reason = False, f"its training grid is {model.grid[0]}x{model.grid[1]} patches"
    else:
        try:
            program = export_program(model, dynamic=True)
        except NotDynamic as e:
            report.dynamic, report.reason = False, f"its graph depends on the grid (guard: {e})"
    if report.dynamic:
        write_onnx(program, out, patch_size=model.patch_size)
        report.files["any"] = out
        sizes = list(dict.fromkeys([*probe_sizes(model), *map(tuple, resolutions)]))
        if check:
            report.checked = check_onnx(out, model, sizes)
        return report
    for hw in dict.fromkeys(map(tuple, resolutions or [train_size(model)])):
        path = out.with_name(f"{out.stem}_{resolution_label(hw)}{out.suffix or '.onnx'}")
        _check_target(path, overwrite)
        write_onnx(export_program(model, dynamic=False, size=hw), path, patch_size=model.patch_size)
        report.files[resolution_label(hw)] = path
        if check:
            report.checked |= check_onnx(path, model, [hw])
    return report


def _scheme(model: ViT) -> str:
    """The registry name of the model's position scheme ("rope2d+peg" for a composition)."""
    from .pos import POS_REGISTRY

    parts = getattr(model.pos, "parts", None)
    if parts is not None:
        return "+".join(parts)
    return next((name for name, cls in POS_REGISTRY.items() if cls is type(model.pos)), type(model.pos).__name__)


# -- command line ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m vitpos.export",
        description="Export a vitpos checkpoint to ONNX with dynamic batch, height and width, checked with "
        "onnxruntime against vitpos.",
    )
    p.add_argument("--ckpt", required=True, help="vitpos checkpoint (.ckpt)")
    p.add_argument("--out", required=True, help="ONNX file to write (FILE.onnx)")
    p.add_argument("--method", help="transfer method to export (default: the scheme's default)")
    p.add_argument(
        "--resolutions", "--resolution", dest="resolutions", nargs="+", default=[], metavar="R",
        help="sizes R or HxW: checked in addition (dynamic export), or exported one file each (fixed grid)",
    )  # fmt: skip
    p.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")
    p.add_argument("--overwrite", action="store_true", help="replace an ONNX file vitpos wrote at --out")
    return p


def summary_lines(report: ExportReport, model: ViT) -> list[str]:
    head = f"{report.scheme} ({report.method})"
    if report.dynamic:
        lines = [
            f"{head}: dynamic batch, height and width (multiples of {model.patch_size} px, "
            f"grids 2..{MAX_GRID} per side) -> {shell(report.files['any'])}"
        ]
    else:
        files = ", ".join(f"{label} px -> {shell(path)}" for label, path in report.files.items())
        lines = [
            f"{head}: NOT dynamic in height and width ({report.reason}); exported for fixed sizes "
            f"(dynamic batch): {files}. Pass --resolutions R ... for other sizes."
        ]
    if report.checked:
        sizes = ", ".join(report.checked)
        verdict = "ok" if report.max_rel_diff <= RTOL else "FAILED"
        lines.append(
            f"onnxruntime vs vitpos at {sizes}: max relative difference {report.max_rel_diff:.1e} "
            f"(limit {RTOL:.0e}): {verdict}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from .checkpoint import load_model

        resolutions = [to_hw(parse_resolution(r)) for r in args.resolutions]
        _check_target(Path(args.out), args.overwrite)  # before the checkpoint is read and the model traced
        model = load_model(args.ckpt)
        report = export_onnx(model, args.out, method=args.method, resolutions=resolutions, check=not args.no_check,
                             overwrite=args.overwrite)  # fmt: skip
    except ConfigError as e:
        print(f"vitpos.export: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vitpos.export: interrupted; every file is written whole or not at all", file=sys.stderr)
        return 130
    for line in summary_lines(report, model):
        print(line)
    return 0 if not report.checked or report.max_rel_diff <= RTOL else 1


if __name__ == "__main__":
    sys.exit(main())
