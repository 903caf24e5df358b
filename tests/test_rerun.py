"""benchmarks/rerun.py: a recorded run is trained again by the flags its study gave it, beside the study's own runs
(never over them), and the two checkpoints' weights are compared tensor by tensor."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from helpers import untrained_checkpoint

from benchmarks import common, rerun


def test_weight_difference_is_zero_for_the_same_weights_and_the_largest_change_otherwise(tmp_path):
    a = untrained_checkpoint(tmp_path / "a.ckpt")
    b = tmp_path / "b.ckpt"
    b.write_bytes(a.read_bytes())
    assert rerun.weight_difference(a, b) == 0.0
    ckpt = torch.load(b, weights_only=True)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point() and v.numel())
    ckpt["state_dict"][name].view(-1)[0] += 0.25
    torch.save(ckpt, b)
    assert rerun.weight_difference(a, b) == pytest.approx(0.25, rel=1e-6)
    del ckpt["state_dict"][name]  # another model: not comparable
    torch.save(ckpt, b)
    assert rerun.weight_difference(a, b) == float("inf")


@pytest.fixture
def study_record(tmp_path, monkeypatch):
    """A study record rooted at ``tmp_path`` with two finished runs (learned under the rule, rope2d), as study.py
    names their folders; trainings are recorded, not run."""
    monkeypatch.setattr(rerun, "ROOT", tmp_path)
    monkeypatch.setattr(common, "ROOT", tmp_path)
    runs = {"learned:patch": "learned-patch-lr30-wd0.3-start-ramp5-seed0", "rope2d:patch": "rope2d-patch-seed0"}
    for name in runs.values():
        (tmp_path / "runs/study" / name / "checkpoints").mkdir(parents=True)
        untrained_checkpoint(tmp_path / "runs/study" / name / "checkpoints" / "last.ckpt")
    budget = {"img_size": 32, "config": None, "rule_pos_lr_scale": 30.0, "rule_pos_weight_decay": 0.3,
              "rule_pos_decay_to": "start", "rule_pos_lr_warmup_epochs": 5.0}  # fmt: skip
    record = {"budget": budget, "runs": [{"spec": s, "seed": 0, "test_top1": 0.9, "run": f"runs/study/{n}"}
                                         for s, n in runs.items()]}  # fmt: skip
    (tmp_path / "study.json").write_text(json.dumps(record))
    flags_of: dict[str, list[str]] = {}

    def train_run(run_dir, flags, retrain=False):
        flags_of[run_dir.name] = flags
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)  # a finished run is reused, not retrained
        source = tmp_path / "runs/study" / run_dir.name / "checkpoints" / "last.ckpt"
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(source.read_bytes())
        return {"test_top1": 0.9, "run": str(run_dir.relative_to(tmp_path))}

    monkeypatch.setattr(rerun, "train_run", train_run)
    return flags_of


def test_a_rerun_trains_the_study_flags_beside_the_study_and_records_both(tmp_path, study_record):
    out = tmp_path / "rerun.json"
    args = ["--study", str(tmp_path / "study.json"), "--runs", "learned:patch", "rope2d:patch", "--json", str(out)]
    assert rerun.main(args) == 0
    learned = study_record["learned-patch-lr30-wd0.3-start-ramp5-seed0"]
    assert learned[learned.index("--pos-lr-scale") + 1] == "30" and "--pos-decay-to" in learned
    assert "--pos-lr-scale" not in study_record["rope2d-patch-seed0"]  # no position parameters: no rule flags
    assert learned[:2] == ["--img-size", "32"]
    rows = json.loads(out.read_text())["reruns"]
    assert [(r["spec"], r["max_weight_difference"]) for r in rows] == [("learned:patch", 0.0), ("rope2d:patch", 0.0)]
    assert all(r["rerun"]["run"].startswith("runs/rerun/") and r["recorded"]["test_top1"] == 0.9 for r in rows)
    assert rerun.main(args) == 0  # again: one row per run and study, not two
    assert len(json.loads(out.read_text())["reruns"]) == 2


def test_a_rerun_refuses_the_studys_own_folder_a_missing_run_and_other_flags(tmp_path, study_record, capsys):
    base = ["--study", str(tmp_path / "study.json"), "--json", str(tmp_path / "rerun.json")]
    for extra, said in (
        (["--runs", "rope2d:patch", "--out", "runs/study"], "holds the study's own runs"),
        (["--runs", "rope2d:patch", "--seeds", "3"], "records no run rope2d:patch seed 3"),
        (["--runs", "fire:patch"], "records no run fire:patch seed 0"),
    ):
        with pytest.raises(SystemExit) as e:
            rerun.main([*base, *extra])
        assert e.value.code == 2 and said in capsys.readouterr().err
    record = json.loads((tmp_path / "study.json").read_text())
    record["budget"]["rule_pos_lr_scale"] = 10.0  # the record's rule no longer names the run's folder
    (tmp_path / "study.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit):
        rerun.main([*base, "--runs", "learned:patch"])
    assert "was not made by these flags" in capsys.readouterr().err
    assert not study_record  # nothing was trained


def test_a_record_since_replaced_is_read_as_committed_and_its_reruns_are_the_new_studys_runs(tmp_path, study_record):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "study.json"], check=True)
    subprocess.run([*git, "commit", "-qm", "a record"], check=True)
    (tmp_path / "study.json").write_text("{}")  # the record replaced: only git still holds its runs
    out = tmp_path / "rerun.json"
    earlier = {"spec": "learned:patch", "seed": 0, "study": "study.json"}  # a row of a record written before rows
    out.write_text(json.dumps({"command": "python -m benchmarks.rerun --runs learned:patch", "reruns": [earlier]}))
    args = ["--study", "HEAD:study.json", "--runs", "rope2d:patch", "--out", "runs/later", "--json", str(out)]
    assert rerun.main(args) == 0
    kept, row = json.loads(out.read_text())["reruns"]
    assert kept == earlier | {"command": "python -m benchmarks.rerun --runs learned:patch"}  # its own command kept
    assert row["study"] == "HEAD:study.json" and row["recorded"]["run"] == "runs/study/rope2d-patch-seed0"
    assert row["command"] == "python -m benchmarks.rerun " + " ".join(args)  # each row names its command
    assert row["rerun"]["run"] == "runs/later/rope2d-patch-seed0"
    for bad in ("HEAD:missing.json", str(tmp_path / "rerun.json.partial")):
        (tmp_path / "rerun.json.partial").write_text("{not json")
        with pytest.raises(SystemExit) as e:
            rerun.main([*args[:1], bad, *args[2:]])
        assert e.value.code == 2  # the parser's one-line error, not a traceback


def test_a_study_made_again_into_the_records_folder_is_its_rerun_and_nothing_is_compared_with_itself(
    tmp_path, study_record, capsys
):
    folder = tmp_path / "runs/study/rope2d-patch-seed0"
    (folder / "results.json").write_text("{}")  # finished
    record = json.loads((tmp_path / "study.json").read_text())
    ckpt = folder / "checkpoints" / "last.ckpt"
    record["runs"][1]["ckpt_sha256"] = common.fingerprint(ckpt)  # the record's own checkpoint is still there
    (tmp_path / "study.json").write_text(json.dumps(record))
    args = ["--study", str(tmp_path / "study.json"), "--runs", "rope2d:patch", "--out", "runs/study", "--json",
            str(tmp_path / "rerun.json")]  # fmt: skip
    with pytest.raises(SystemExit):
        rerun.main(args)
    assert "holds the study's own runs" in capsys.readouterr().err and not study_record
    record["runs"][1]["ckpt_sha256"] = "0" * 64  # a later training replaced it in the same folder
    (tmp_path / "study.json").write_text(json.dumps(record))
    assert rerun.main(args) == 0
    (row,) = json.loads((tmp_path / "rerun.json").read_text())["reruns"]
    assert row["rerun"]["run"] == row["recorded"]["run"] == "runs/study/rope2d-patch-seed0"
    assert row["max_weight_difference"] is None and row["config_differences"] is None  # not the run against itself


def test_config_differences_name_the_fields_two_runs_set_apart_but_where_they_went(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("model:\n  pos: rope2d\n  img_size: 32\ntrainer:\n  out: runs/a\n  seed: 0\n")
    b.write_text("model:\n  pos: rope2d\n  img_size: 32\ntrainer:\n  out: runs/b\n  seed: 0\n")
    assert rerun.config_differences(a, b) == []
    b.write_text("model:\n  pos: rope2d\n  img_size: 48\n  pos_grid: [8, 8]\ntrainer:\n  out: runs/b\n  seed: 0\n")
    assert rerun.config_differences(a, b) == ["model.img_size", "model.pos_grid"]  # a's pos_grid: its default
