"""benchmarks/dilate.py and its section of the real-data page: each PEG checkpoint under its chosen method and with
PEG's kernel dilated, both regimes, both splits, measured once; the page's paired differences on a record whose answer
is known."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from helpers import fake_sweeps

from benchmarks import common, dilate
from benchmarks.pages.real_data import dilate_section
from benchmarks.pages.summary import Study

SEEDS = [0, 1, 2]
PEG = "relbias+peg:patch"
# what the fake sweep returns: dilating gains 4 points under zoom and loses 3 under canvas on test; on validation
# it gains 2 under zoom and loses 1 under canvas
SHIFT = {("test", "zoom"): 0.04, ("test", "canvas"): -0.03, ("val", "zoom"): 0.02, ("val", "canvas"): -0.01}


def base_top1(seed: int) -> float:
    return 0.5 + 0.01 * seed


@pytest.fixture
def record(tmp_path, monkeypatch) -> Path:
    """A Fashion-MNIST-like study record rooted at ``tmp_path``: relbias+peg at three seeds (a checkpoint each, the
    record naming its SHA-256), learned (no PEG: not measured) and none (the baseline of the fall), with test cells
    at 1x and under zoom at 24 px for the page."""
    monkeypatch.setattr(dilate, "ROOT", tmp_path)
    monkeypatch.setattr(common, "ROOT", tmp_path)
    runs, records = [], []
    for k in SEEDS:
        ckpt = tmp_path / f"runs/p{k}/checkpoints/last.ckpt"
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"w%d" % k)
        runs.append({"spec": PEG, "seed": k, "run": f"runs/p{k}", "commit": "abc", "test_top1": 0.7,
                     "ckpt_sha256": hashlib.sha256(b"w%d" % k).hexdigest()})  # fmt: skip
        runs.append({"spec": "learned:patch", "seed": k, "run": f"runs/l{k}"})
        runs.append({"spec": "none:patch", "seed": k, "run": f"runs/n{k}"})
        for scheme, method, at1, at24 in (
            ("relbias+peg", "resize+conv", 0.8, base_top1(k)),
            ("none", "none", 0.8, 0.7),
        ):
            for size, top1 in ((16, at1), (24, at24)):
                records.append({"scheme": scheme, "stem": "patch", "method": method, "regime": "zoom", "split": "test",
                                "resolution": size, "seed": k, "top1": top1})  # fmt: skip
    path = tmp_path / "fashion_mnist_study.json"
    path.write_text(json.dumps({"budget": {"img_size": 16}, "sizes": ["12", "16", "24"], "far": ["32"], "runs": runs,
                                "records": records,
                                "choices": {PEG: {"method": "resize+conv"}, "learned:patch": {"method": "bicubic"},
                                            "none:patch": {"method": "none"}}}))  # fmt: skip
    return path


def fake_sweep(calls: list):
    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        calls.append((Path(ckpt).parent.parent.name, split, tuple(sizes), limit, tuple(methods), regimes))
        seed = int(Path(ckpt).parent.parent.name[1:])
        return [
            {
                "checkpoint": str(ckpt),
                "scheme": "relbias+peg",
                "stem": "patch",
                "method": m,
                "regime": regime,
                "resolution": int(s),
                "split": split,
                "samples": limit or 2000,
                "top1": base_top1(seed) + (SHIFT[(split, regime)] if m.endswith("+dilate") else 0.0),
            }  # fmt: skip
            for m in methods
            for regime in regimes
            for s in sizes
        ]

    return sweep


def test_dilated_names_the_peg_part_only():
    assert dilate.dilated("relbias+peg", "resize+conv") == "resize+dilate"
    assert dilate.dilated("peg", "conv") == "dilate"
    assert dilate.dilated("rope2d", "interpolate") is None


def test_each_peg_checkpoint_is_measured_both_ways_in_both_regimes_once(tmp_path, record, monkeypatch):
    calls: list = []
    fake_sweeps(monkeypatch, fake_sweep(calls))
    out = tmp_path / "dilate.json"
    argv = ["--study", str(record), "--json", str(out)]
    assert dilate.main(argv) == 0
    assert len(calls) == 6  # 3 checkpoints x 2 splits; learned has no PEG and none no checkpoint here
    assert {c[2] for c in calls} == {("24", "32")}  # sizes and far sizes above the training size
    assert {c[4] for c in calls} == {("resize+conv", "resize+dilate")} and {c[5] for c in calls} == {("zoom", "canvas")}
    assert {(c[1], c[3]) for c in calls} == {("val", 1000), ("test", None)}
    data = json.loads(out.read_text())
    assert all(r["ckpt_sha256"] == r["recorded_sha256"] and r["train_commit"] == "abc" for r in data["records"])
    assert dilate.main(argv) == 0 and len(calls) == 6  # recorded: nothing measured again

    text = dilate_section(Study(json.loads(record.read_text())), data)
    gain = next(ln for ln in text.splitlines() if ln.startswith("| `relbias+peg`"))
    # columns: zoom 1.5x, zoom 2x, canvas 1.5x, canvas 2x; the same shift on every run: no spread, separated
    assert (
        gain
        == "| `relbias+peg` | +4.0 [+4.0, +4.0] * | +4.0 [+4.0, +4.0] * | -3.0 [-3.0, -3.0] * | -3.0 [-3.0, -3.0] * |"
    )
    # fall minus none's, dilated, at zoom 1.5x: (80 - (50 + k + 4)) - (80 - 70) = 16 - k, mean 15 over seeds 0-2
    excess = [ln for ln in text.splitlines() if ln.startswith("| `relbias+peg`")][1]
    assert excess.startswith("| `relbias+peg` | +15.0 [")
    assert (
        "`relbias+peg` under zoom: `dilate` (+2.0 points); `relbias+peg` under canvas: as it is (-1.0 points)" in text
    )
    assert "reproduces the study's own cells for these runs: 3 cells, largest difference 0.00 points" in text


def test_a_checkpoint_trained_again_is_accepted_only_with_the_recorded_test_top1(tmp_path, record, monkeypatch, capsys):
    fake_sweeps(monkeypatch, fake_sweep([]))
    (tmp_path / "runs/p0/checkpoints/last.ckpt").write_bytes(b"trained again")  # another SHA-256
    out = tmp_path / "dilate.json"
    with pytest.raises(SystemExit) as e:
        dilate.main(["--study", str(record), "--json", str(out)])
    assert e.value.code == 2 and "not the run" in capsys.readouterr().err and not out.exists()

    def trained_again(top1: float) -> None:  # results.json as train.py writes it; the recorded test top-1 is 0.7
        (tmp_path / "runs/p0/results.json").write_text(json.dumps({
            "best_val_top1": 0.8, "test": {"test/top1": top1}, "train_seconds": 1.0, "global_step": 10,
            "last_train": {"train/top1": 0.9}}))  # fmt: skip

    trained_again(0.69)
    with pytest.raises(SystemExit):
        dilate.main(["--study", str(record), "--json", str(out)])
    assert "not the run" in capsys.readouterr().err and not out.exists()

    trained_again(0.7)
    assert dilate.main(["--study", str(record), "--json", str(out)]) == 0
    kept = [r for r in json.loads(out.read_text())["records"] if r["seed"] == 0]
    assert kept and all(r["ckpt_sha256"] != r["recorded_sha256"] for r in kept)


def test_a_study_without_peg_or_bad_sizes_get_the_parsers_one_line_error(tmp_path, record, capsys):
    data = json.loads(record.read_text())
    data["choices"] = {"learned:patch": {"method": "bicubic"}}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    for argv, said in ((["--study", str(record), "--sizes", "16"], "sizes above the training size"),
                       (["--study", str(bare)], "no scheme with a `peg` part"),
                       (["--study", str(tmp_path / "missing.json")], "not a study record")):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            dilate.main([*argv, "--json", str(tmp_path / "out.json")])
        assert e.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_the_page_says_not_measured_without_a_record(record):
    assert dilate_section(Study(json.loads(record.read_text())), None).startswith("Not measured yet")
