"""Export: one ONNX file / ExportedProgram per model serves every size; no complex value is traced."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import ROOT

import vitpos
from vitpos.config import Config
from vitpos.export import (
    RTOL,
    NotDynamic,
    complex_values,
    export_onnx,
    main,
    relative_difference,
    summary_lines,
    write_onnx,
)

# Each registry scheme is exported once (module-scoped, below) and that export serves every test of it. An export
# costs seconds whatever the model size (torch.export's trace and the ONNX exporter's decomposition pass, each a
# trace with symbolic shapes; more for relbias and cpb, whose table resize is symbolic), so the model is the
# smallest that still shows position: depth 1, dim 32, training grid 8x8 (32 px, patch 4).
SMALL = dict(img_size=32, patch_size=4, embed_dim=32, depth=1, num_heads=4, num_classes=5)
SIZES = [(32, 32), (24, 48), (64, 64)]  # the training size, a smaller non-square one, a larger one
ROPE = [p for p in vitpos.POS_SCHEMES if "rope" in p]

pytestmark = [pytest.mark.export, pytest.mark.usefixtures("one_thread")]  # tracing and tiny models: one thread


def small(pos: str, **kw) -> vitpos.ViT:
    torch.manual_seed(0)
    model = vitpos.create_model(pos, **{**SMALL, **kw}).eval()
    with torch.no_grad():  # sharp attention and position parameters far from their init, so that position shows
        for block in model.blocks:
            block.attn.qkv.weight.mul_(30)
        for name, p in model.named_parameters():
            if name.startswith("pos."):
                p.add_(torch.randn_like(p) * p.abs().mean().clamp_min(0.05))
    return model


def session(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_onnx(path_or_session, x: torch.Tensor) -> torch.Tensor:
    s = path_or_session if isinstance(path_or_session, ort.InferenceSession) else session(path_or_session)
    return torch.from_numpy(s.run(None, {s.get_inputs()[0].name: x.numpy()})[0])


@dataclass
class Exported:
    model: vitpos.ViT
    program: torch.export.ExportedProgram
    path: Path  # the ONNX file
    session: ort.InferenceSession


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """exported(pos) -> Exported: the scheme's small model, ExportedProgram and ONNX file, made once for the module."""
    done: dict[str, Exported] = {}
    folder = tmp_path_factory.mktemp("export")

    def get(pos: str) -> Exported:
        if pos not in done:
            model = small(pos)
            program = vitpos.export_program(model, dynamic=True)
            path = write_onnx(program, folder / f"{pos}.onnx", patch_size=model.patch_size)
            done[pos] = Exported(model, program, path, session(path))
        return done[pos]

    return get


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_one_onnx_file_serves_every_size_with_vitpos_logits(exported, pos):
    e = exported(pos)
    for i, size in enumerate(SIZES):
        x = torch.randn(3 if i else 1, 3, *size)
        with torch.no_grad():
            ref = e.model(x)
        assert relative_difference(run_onnx(e.session, x), ref) <= RTOL, size
    assert complex_values(onnx.load(str(e.path))) == []


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_exported_program_has_dynamic_height_and_width(exported, pos):
    model, program = exported(pos).model, exported(pos).program
    runner = program.module()
    for size in SIZES:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            assert relative_difference(runner(x), model(x)) <= RTOL, size
    # the grid is a symbol of the program, not a number traced from the example input
    name = program.graph_signature.user_inputs[0]
    image = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name).meta["val"]
    assert all(isinstance(d, torch.SymInt) for d in image.shape[2:]), image.shape


def test_the_transfer_method_and_the_positions_really_flow_into_the_file(exported, tmp_path):
    """A file exported with another method computes that method, and differs where the methods differ."""
    model, default_path = exported("rope2d").model, exported("rope2d").path
    default = model.pos.method
    other = next(m for m in ("extrapolate", "interpolate") if m != default)
    x = torch.randn(2, 3, 64, 48)
    model.pos.method = other
    try:
        report = export_onnx(model, tmp_path / "other.onnx", check=False)
        with torch.no_grad():
            ref = model(x)
        assert report.dynamic and report.method == other
        assert relative_difference(run_onnx(report.files["any"], x), ref) <= RTOL
        assert relative_difference(run_onnx(default_path, x), ref) > 100 * RTOL  # the default is another model
    finally:
        model.pos.method = default


@pytest.mark.parametrize("method", ["ntk", "yarn"])
def test_methods_that_change_only_above_the_trained_grid_are_one_dynamic_file(tmp_path, method):
    """NTK and YaRN leave a grid no larger than the trained one as it is and rescale a larger one (YaRN with its
    logit temperature): a select in the graph, so one file serves both sides, at each axis's own factor."""
    model = small("rope2d")
    model.pos.method = method
    report = export_onnx(model, tmp_path / "m.onnx", check=False)
    assert report.dynamic and report.method == method
    for size in SIZES + [(16, 128)]:  # the training size, each axis below or above it, both above
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ref = model(x)
        assert relative_difference(run_onnx(report.files["any"], x), ref) <= RTOL, size


def test_a_method_that_branches_on_the_grid_is_exported_for_fixed_sizes(tmp_path):
    model = small("relbias")
    model.pos.method = "geometric"  # timm's resize computes the table's new offsets in Python from the grid
    with pytest.raises(NotDynamic):
        vitpos.export_program(model, dynamic=True)
    report = export_onnx(model, tmp_path / "m.onnx", resolutions=[(24, 48)])
    assert not report.dynamic and "depends on the grid" in report.reason
    assert {k: v.name for k, v in report.files.items()} == {"24x48": "m_24x48.onnx"}
    assert list(report.checked) == ["24x48"] and report.max_rel_diff <= RTOL
    printed = " ".join(summary_lines(report, model))  # what the command prints
    assert "NOT dynamic in height and width" in printed and "--resolutions" in printed and ": ok" in printed
    x = torch.randn(3, 3, 24, 48)  # a dynamic batch: 3 images although it was traced with 2
    with torch.no_grad():
        assert relative_difference(run_onnx(report.files["24x48"], x), model(x)) <= RTOL
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        run_onnx(report.files["24x48"], torch.randn(1, 3, 32, 32))  # fixed: the file serves only its size


# -- no complex dtype is traced ------------------------------------------------------------------------------


def _complex_ops(graph_text: str) -> bool:
    return "view_as_complex" in graph_text or "complex" in graph_text.lower()


@pytest.mark.parametrize("pos", ROPE)
def test_tracing_and_export_take_the_real_rotation(exported, pos):
    model, program = exported(pos).model, exported(pos).program  # torch.export, dynamic height and width
    x = torch.randn(2, 3, 32, 32)
    dtypes = {n.meta["val"].dtype for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)}
    assert not {torch.complex64, torch.complex128} & dtypes
    assert not _complex_ops(str(program.graph))
    with torch.no_grad():
        traced = torch.jit.trace(model, x, check_trace=False)
    assert not _complex_ops(str(traced.inlined_graph))
    with torch.no_grad():  # the traced real form computes what eager's complex multiply does
        assert relative_difference(traced(x), model(x)) <= RTOL
        assert relative_difference(program.module()(x), model(x)) <= RTOL


def test_eager_fp32_still_rotates_with_the_complex_multiply():
    """The export branch is taken only while tracing: eager keeps its faster complex form."""
    model = small("rope2d")
    with torch.profiler.profile() as prof, torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
    assert any("view_as_complex" in e.name for e in prof.events())


# -- command line --------------------------------------------------------------------------------------------


def write_checkpoint(path, pos: str = "rope2d") -> vitpos.ViT:
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth = pos, 32, 4, 1
    cfg.model.num_classes = 5
    from vitpos.config import model_from_config

    torch.manual_seed(0)
    model = model_from_config(cfg)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": {"config": cfg.to_dict()}, "vitpos_format": 2}, path)
    return model.eval()


def test_cli_writes_a_checked_dynamic_file(tmp_path, capsys):
    model = write_checkpoint(tmp_path / "m.ckpt", "learned")
    out = tmp_path / "deploy" / "m.onnx"
    assert main(["--ckpt", str(tmp_path / "m.ckpt"), "--out", str(out), "--resolutions", "40x24"]) == 0
    printed = capsys.readouterr().out
    assert "learned (bicubic): dynamic batch, height and width" in printed
    assert "40x24" in printed and ": ok" in printed
    x = torch.randn(2, 3, 40, 24)
    with torch.no_grad():
        assert relative_difference(run_onnx(out, x), model(x)) <= RTOL


def _one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and "Warning" not in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.cli
def test_cli_bad_input_fails_in_one_line(tmp_path, capsys):
    ckpt = tmp_path / "m.ckpt"
    write_checkpoint(ckpt)
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    out = str(tmp_path / "m.onnx")
    cases = {
        "checkpoint not found": ["--ckpt", str(tmp_path / "nope.ckpt"), "--out", out],
        "not a vitpos checkpoint": ["--ckpt", str(foreign), "--out", out],
        "unknown method 'bicubic'": ["--ckpt", str(ckpt), "--out", out, "--method", "bicubic"],
        "not a positive multiple of the patch size 4": ["--ckpt", str(ckpt), "--out", out, "--resolution", "30"],
        "resolution must be an integer": ["--ckpt", str(ckpt), "--out", out, "--resolution", "big"],
    }
    for expected, argv in cases.items():
        assert main(argv) == 2, expected
        assert expected in _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "m.onnx").exists()
    proc = subprocess.run(
        [sys.executable, "-m", "vitpos.export", "--ckpt", str(tmp_path / "nope.ckpt"), "--out", out],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 2 and "checkpoint not found" in _one_line_error(proc.stderr)


def test_the_onnx_file_refuses_a_size_that_is_not_a_multiple_of_the_patch_as_eager_does(exported):
    e = exported("learned")
    for size in [(34, 32), (32, 30), (33, 35)]:
        x = torch.randn(1, 3, *size)
        with pytest.raises(ValueError, match="multiple of the patch size 4"):
            e.model(x)
        with pytest.raises(Exception, match="multiples_of_4"):
            run_onnx(e.session, x)
    with pytest.raises(Exception, match="(?i)shape|guard|constraint|size"):
        e.program.module()(torch.randn(1, 3, 34, 32))


def test_a_one_patch_model_is_exported_at_its_size(tmp_path):
    model = small("learned", img_size=8, patch_size=8)
    report = export_onnx(model, tmp_path / "one.onnx")
    assert not report.dynamic and "1x1 patches" in report.reason
    assert list(report.files) == ["8"] and report.max_rel_diff <= RTOL
    x = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        assert relative_difference(run_onnx(report.files["8"], x), model(x)) <= RTOL


def test_an_existing_out_is_kept_unless_asked_and_a_file_vitpos_did_not_write_always(tmp_path, capsys):
    write_checkpoint(tmp_path / "m.ckpt", "none")
    out, ckpt = tmp_path / "m.onnx", str(tmp_path / "m.ckpt")
    out.write_text("my notes")
    for extra in ([], ["--overwrite"]):
        assert main(["--ckpt", ckpt, "--out", str(out), "--no-check", *extra]) == 2
        err = _one_line_error(capsys.readouterr().err)
        assert ("already exists" if not extra else "not an ONNX file vitpos.export wrote") in err
    assert out.read_text() == "my notes"
    out.unlink()
    assert main(["--ckpt", ckpt, "--out", str(out), "--no-check"]) == 0
    written = out.read_bytes()
    assert main(["--ckpt", ckpt, "--out", str(out), "--no-check"]) == 2 and "--overwrite" in capsys.readouterr().err
    assert out.read_bytes() == written
    assert main(["--ckpt", ckpt, "--out", str(out), "--no-check", "--overwrite"]) == 0  # its own file: replaced
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".ckpt"] == ["m.onnx"]  # no temporary file left


def test_a_failed_write_is_one_line_and_keeps_the_earlier_file(tmp_path, monkeypatch):
    import errno

    from vitpos.config import ConfigError

    model, out = small("none"), tmp_path / "m.onnx"
    export_onnx(model, out, check=False)
    before = out.read_bytes()

    def full(proto, path, *a, **k):
        Path(path).write_bytes(b"half a file")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(onnx, "save_model", full)
    with pytest.raises(ConfigError, match="No space left on device .*disk is full.*is as it was"):
        export_onnx(model, out, check=False, overwrite=True)
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_an_out_that_cannot_be_made_and_ctrl_c_are_one_line(tmp_path, capsys, monkeypatch):
    write_checkpoint(tmp_path / "m.ckpt", "none")
    (tmp_path / "file").write_text("")
    assert main(["--ckpt", str(tmp_path / "m.ckpt"), "--out", str(tmp_path / "file" / "m.onnx")]) == 2
    assert "is a file" in _one_line_error(capsys.readouterr().err)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("vitpos.export.export_onnx", interrupted)
    assert main(["--ckpt", str(tmp_path / "m.ckpt"), "--out", str(tmp_path / "m.onnx")]) == 130
    assert "interrupted" in _one_line_error(capsys.readouterr().err)


def test_onnx_output_is_fp32_logits_of_the_right_shape(exported):
    path = exported("none").path
    m = onnx.load(str(path))
    (inp,), (out,) = m.graph.input, m.graph.output
    dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    assert dims[1] == 3 and all(isinstance(d, str) for d in (dims[0], dims[2], dims[3])), dims  # B, H, W symbolic
    assert out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert np.isfinite(run_onnx(path, torch.randn(1, 3, 8, 8)).numpy()).all()


def test_the_export_benchmark_times_string_folded_against_rope2d_and_its_page_says_so(exported):
    """benchmarks/export.py times `string`'s folded ONNX file against `rope2d`'s in one round-robin per size, and
    the export section states each ratio (or nothing where it was not measured)."""
    import argparse

    from benchmarks.export import folded_against
    from benchmarks.pages.export import folded_line

    folder = exported("rope2d").path.parent
    assert exported("string").path.parent == folder
    a = argparse.Namespace(threads=1, img_sizes=[32, 48], batch_size=2, steps=1, repeats=2)
    rows = folded_against(a, folder)
    assert [(r["scheme"], r["against"], r["img_size"]) for r in rows] == [("string", "rope2d", 32),
                                                                         ("string", "rope2d", 48)]  # fmt: skip
    assert all(0 < r["ratio_min"] <= r["ratio"] <= r["ratio_max"] for r in rows)
    line = folded_line(rows)
    assert all(f"{r['img_size']} px {r['ratio']:.2f}" in line for r in rows)
    assert folded_line([]) is None
