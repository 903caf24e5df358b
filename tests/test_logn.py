"""benchmarks/logn.py and its page: each checkpoint under zoom as it is and with log-n logit scaling, on validation
and test, measured once per checkpoint, and the page's paired differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import fake_sweeps

from benchmarks import common, logn, study
from benchmarks.pages import logn as page

SEEDS = [0, 1, 2]


@pytest.fixture
def record(tmp_path, monkeypatch) -> Path:
    """A study record rooted at ``tmp_path`` with rope2d at three seeds (a checkpoint each) and a run without one."""
    monkeypatch.setattr(logn, "ROOT", tmp_path)
    monkeypatch.setattr(common, "ROOT", tmp_path)
    runs = []
    for k in SEEDS:
        (tmp_path / f"runs/r{k}/checkpoints").mkdir(parents=True)
        (tmp_path / f"runs/r{k}/checkpoints/last.ckpt").write_bytes(b"w%d" % k)
        runs.append({"spec": "rope2d:patch", "seed": k, "run": f"runs/r{k}", "commit": "abc"})
    runs.append({"spec": "learned:patch", "seed": 0, "run": "runs/gone"})  # no checkpoint: nothing to measure
    path = tmp_path / "study.json"
    path.write_text(json.dumps({"budget": {"img_size": 32}, "sizes": ["24", "32", "64"], "runs": runs,
                                "choices": {"rope2d:patch": {"method": "interpolate"},
                                            "learned:patch": {"method": "bicubic"}}}))  # fmt: skip
    return path


def fake_sweep(calls: list):
    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        calls.append((Path(ckpt).parent.parent.name, split, tuple(sizes), limit, tuple(methods), regimes, control))
        seed = int(Path(ckpt).parent.parent.name[1:])
        # log-n lowers zoom by 5 points on test and raises it by 1 on validation
        shift = {("test", "logn"): -0.05, ("val", "logn"): 0.01}.get((split, control["logit_scaling"]), 0.0)
        return [
            {
                "checkpoint": str(ckpt),
                "scheme": "rope2d",
                "stem": "patch",
                "method": methods[0],
                "regime": "zoom",
                "resolution": int(s),
                "split": split,
                "top1": 0.5 + 0.01 * seed + shift,
                "samples": limit or 2000,
            }
            for s in sizes
        ]

    return sweep


def test_each_checkpoint_is_measured_both_ways_on_both_splits_once_with_its_chosen_method(tmp_path, record,
                                                                                         monkeypatch):  # fmt: skip
    calls: list = []
    fake_sweeps(monkeypatch, fake_sweep(calls))
    out = tmp_path / "logn.json"
    argv = ["--study", str(record), "--json", str(out)]
    assert logn.main(argv) == 0
    assert len(calls) == 12  # 3 checkpoints x 2 splits x 2 scalings; the run without a checkpoint is skipped
    assert {c[2] for c in calls} == {("64",)}  # the study's sizes above its training size
    assert {(c[1], c[3]) for c in calls} == {("val", 1000), ("test", None)}
    assert {c[4] for c in calls} == {("interpolate",)} and {c[5] for c in calls} == {("zoom",)}
    assert {c[6]["logit_scaling"] for c in calls} == {"none", "logn"}
    data = json.loads(out.read_text())
    assert data["study"] == "study.json" and data["train_size"] == 32
    assert all(r["ckpt_sha256"] and r["train_commit"] == "abc" and r["device"] for r in data["records"])
    assert logn.main(argv) == 0 and len(calls) == 12  # recorded: nothing measured again
    text = page.render(data, tmp_path)
    row = next(ln for ln in text.splitlines() if ln.startswith("| `rope2d`"))
    assert row == "| `rope2d` | `interpolate` | 51.0 ±2.5 | -5.0 [-5.0, -5.0] * |"
    assert "log-n raises the mean over these sizes for `rope2d`: a study offering the scaling" in text
    assert "its first 1,000 images per cell" in text
    chosen = json.loads(record.read_text())
    chosen["choices"]["rope2d:patch"]["method"] = "yarn"  # validation chose again: the old method's records go
    record.write_text(json.dumps(chosen))
    assert logn.main(argv) == 0 and len(calls) == 24 and {c[4] for c in calls[12:]} == {("yarn",)}
    assert {r["sweep"]["method"] for r in json.loads(out.read_text())["records"]} == {"yarn"}


def test_a_cell_that_counted_fewer_images_than_its_split_is_not_recorded(tmp_path, record, monkeypatch):
    calls: list = []
    monkeypatch.setattr(study, "sweep_checkpoint", fake_sweep(calls))
    monkeypatch.setattr(study, "checkpoint_split_size", lambda ckpt, split: 2500)  # the fake counts 2000 on test
    out = tmp_path / "logn.json"
    assert logn.main(["--study", str(record), "--json", str(out)]) == 0
    assert {r["split"] for r in json.loads(out.read_text())["records"]} == {"val"}  # test cells come back next pass


def test_bad_sizes_or_a_bad_record_get_the_parsers_one_line_error(tmp_path, record, capsys):
    for argv, said in ((["--study", str(record), "--sizes", "32"], "sizes above the training size"),
                       (["--study", str(tmp_path / "missing.json")], "not a study record")):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            logn.main([*argv, "--json", str(tmp_path / "out.json")])
        assert e.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
