"""The GPU check's pieces on the CPU: the script stops in one line without CUDA, the attention benchmark runs and its
crossover rule holds, the check's record keeps every part, and docs/gpu.md renders from that record."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import tables

from benchmarks import attention, gpu
from benchmarks.pages import gpu as gpu_page

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_the_check_stops_at_once_in_one_line_without_cuda(tmp_path):
    proc = subprocess.run(["bash", ".ci/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OUT=str(tmp_path / "out")))  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip() == "gpu_check: no CUDA device here (torch.cuda.is_available() is False); stopping"
    assert not list((tmp_path / "out").iterdir())  # nothing measured, nothing written


def test_attention_benchmark_quick_times_both_kernels_on_every_bias_scheme(tmp_path):
    """--quick on the CPU (forward only): a row per scheme and size with both kernels' times, FlexAttention's output
    the dense one's within fp32 rounding, and a crossover per scheme."""
    out = tmp_path / "attention.json"
    assert attention.main(["--quick", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert {(r["scheme"], r["img_size"]) for r in d["rows"]} == {(s, i) for s in attention.SCHEMES for i in (16, 32)}
    for r in d["rows"]:
        assert r["direction"] == "forward" and len(r["sdpa_ms"]) == len(r["flex_ms"]) == 2
        assert r["max_abs_diff"] < 1e-5, r
    assert [c["scheme"] for c in d["crossovers"]] == list(attention.SCHEMES)


def test_attention_benchmark_refuses_cuda_without_it_in_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a CUDA GPU")
    with pytest.raises(SystemExit) as e:
        attention.main(["--out", "x.json"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error: no CUDA device" in err and "Traceback" not in err


def row(img: int, sdpa: float, flex: float, direction: str = "forward") -> dict:
    return {"scheme": "relbias", "img_size": img, "direction": direction, "sdpa_ms": [sdpa] * 3, "flex_ms": [flex] * 3}


@pytest.mark.parametrize(
    ("times", "expected"),
    [([(2, 1), (2, 1), (2, 1)], 224), ([(1, 2), (2, 1), (2, 1)], 384), ([(1, 2), (1, 2), (2, 1)], 512),
     ([(2, 1), (1, 2), (2, 1)], 512), ([(2, 1), (2, 1), (1, 2)], None), ([(1, 2)] * 3, None)],
)  # fmt: skip
def test_crossover_is_where_flex_wins_from_there_on(times, expected):
    rows = [row(img, s, f) for img, (s, f) in zip((512, 224, 384), [times[2], times[0], times[1]], strict=True)]
    assert attention.crossovers(rows) == [{"scheme": "relbias", "direction": "forward", "flex_from_img_size": expected}]


def fake_run(folder: Path, pos: str, top1: float) -> Path:
    """A finished train.py run as the check leaves one: results.json, provenance.json and the evaluator's sweep."""
    (folder / "sweep").mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "pos": pos, "epochs": 8, "best_val_top1": 0.9, "test": {"test/top1": top1}, "last_train": {"train/top1": 0.95},
        "train_seconds": 60.0, "global_step": 1700}))  # fmt: skip
    (folder / "provenance.json").write_text(json.dumps({"hardware": "1 x NVIDIA H100", "device": "cuda",
                                                        "commit": "abc", "torch": "2.11"}))  # fmt: skip
    sweep = [
        {"resolution": r, "regime": "zoom", "method": m, "top1": t, "samples": 5000, "split": "val", "extra": 1}
        for r, m, t in ((28, "interpolate", 0.9), (112, "interpolate", 0.5), (28, "ntk", 0.9), (112, "ntk", 0.6))
    ]
    (folder / "sweep" / "resolution.json").write_text(json.dumps(sweep))
    return folder


def test_the_record_keeps_every_part_and_the_page_reads_it(tmp_path):
    """start, a part per step (a test part with its JUnit counts, one that ran out of time), the Fashion-MNIST runs (an
    unfinished one too); a part recorded again replaces itself. docs/gpu.md's tables come from the record."""
    assert gpu.main(["start", str(tmp_path), "--command", "bash .ci/gpu_check.sh"]) == 0
    (tmp_path / "t.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="test_cuda_x"/>'
        '<testcase classname="tests.test_a" name="test_cuda_y"><failure message="boom"/></testcase>'
        '<testcase classname="tests.test_b" name="test_cuda_z"><skipped/></testcase></testsuite></testsuites>'
    )
    assert gpu.main(["part", str(tmp_path), "cuda_tests", "--rc", "1", "--seconds", "30", "--limit", "100",
                     "--junit", str(tmp_path / "t.xml")]) == 0  # fmt: skip
    assert gpu.main(["part", str(tmp_path), "throughput", "--rc", "0", "--seconds", "50", "--limit", "130"]) == 0
    assert gpu.main(["part", str(tmp_path), "attention", "--rc", "124", "--seconds", "110", "--limit", "110"]) == 0
    assert gpu.main(["part", str(tmp_path), "throughput", "--rc", "0", "--seconds", "60", "--limit", "130"]) == 0
    runs = [fake_run(tmp_path / "fm" / "rope2d", "rope2d", 0.91), tmp_path / "fm" / "relbias"]
    assert gpu.main(["fashion-mnist", str(tmp_path), *map(str, runs)]) == 0
    d = json.loads((tmp_path / "gpu.json").read_text())
    assert d["check"] == "bash .ci/gpu_check.sh" and "machine" in d
    assert [(p["name"], p["rc"], p["timed_out"]) for p in d["parts"]] == [
        ("cuda_tests", 1, False), ("attention", 124, True), ("throughput", 0, False)]  # fmt: skip
    assert d["parts"][0]["junit"] == {"tests": 3, "failed": ["tests.test_a::test_cuda_y"], "skipped": 1, "passed": 1}
    fm = d["fashion_mnist"]
    assert [r["finished"] for r in fm] == [True, False] and fm[0]["test_top1"] == 0.91 and fm[0]["device"] == "cuda"
    assert all("extra" not in s for s in fm[0]["sweep"]) and len(fm[0]["sweep"]) == 4

    page = gpu_page.render(d, tmp_path)
    parts, fashion = tables(page)
    assert [r[:2] for r in parts[1:]] == [["cuda_tests", "failed (exit 1)"], ["attention", "ran out of time (110 s)"],
                                          ["throughput", "finished"]]  # fmt: skip
    assert "1 passed, 1 failed, 1 skipped of 3" in page and "- failed: `tests.test_a::test_cuda_y`" in page
    assert page.count("Not measured.") == 2  # no throughput or attention record beside it
    assert "1 of 2 runs finished" in page
    assert fashion[0] == ["scheme", "epochs", "test top-1 (28 px)", "method", "val 28 px", "val 112 px"]
    assert fashion[1:] == [["`rope2d`", "8", "91.0", "`interpolate`", "90.0", "50.0"],
                           ["`rope2d`", "8", "91.0", "`ntk`", "90.0", "60.0"]]  # fmt: skip


def test_the_page_sets_each_scheme_beside_its_timm_counterpart_eager_and_compiled(tmp_path):
    """Throughput rows: img/s and the per-round ratio to the counterpart the record names (lookhere: timm's plain ViT),
    MFU against the datasheet peak of the record's device; compiled grids of both compiled records."""

    def grid(img: int, rates: dict[str, float]) -> dict:
        c = {n: {"img_s": [v, v], "memory_mib": 100.0, "gflops_fwd": 4.0} for n, v in rates.items()}
        c["lookhere"]["counterpart"] = "timm:learned"
        return {"img_size": img, "batch": 8, "contenders": c, "shapes_img_s": 1.0}

    setup = {"command": "c", "machine": {"date": "d", "cpu": "x", "cores": 16, "torch": "t", "gpu": "NVIDIA H100 80GB"},
             "device": "cuda", "dtype": "bf16", "model": "small", "dims": {"embed_dim": 384, "depth": 12,
             "num_heads": 6}, "patch_size": 16, "threads": 16, "warmup": 3, "repeats": 2, "steps": 5,
             "gpu": "NVIDIA H100 80GB", "compiled": False}  # fmt: skip
    rates = {"lookhere": 900.0, "timm:learned": 1000.0}
    (tmp_path / "gpu_performance.json").write_text(json.dumps(setup | {"grids": [grid(224, rates), grid(384, rates)]}))
    compiled = setup | {"compiled": True}
    (tmp_path / "gpu_performance_compiled.json").write_text(json.dumps(compiled | {"grids": [grid(224, rates)]}))
    (tmp_path / "gpu_performance_compiled_more.json").write_text(json.dumps(compiled | {"grids": [grid(384, rates)]}))
    d = {"command": "x", "machine": setup["machine"], "check": "bash .ci/gpu_check.sh", "parts": [],
         "fashion_mnist": []}  # fmt: skip
    page = gpu_page.render(d, tmp_path)
    (_, throughput) = tables(page)
    mfu = f"{100 * 3 * 4.0e9 * 900 / 989e12:.1f} %"  # docs/anchors.yaml: H100 bf16 989 TFLOP/s
    assert throughput[1] == ["224 px", "`lookhere`", "900", "0.90 (0.90 to 0.90)", "100", mfu,
                             "900", "0.90 (0.90 to 0.90)", "100", mfu]  # fmt: skip
    assert throughput[2][:2] == ["384 px", "`lookhere`"] and throughput[2][6] == "900"  # from the "more" record
