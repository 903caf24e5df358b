"""The study's protocol: every choice is made on validation from the records, never on test, and the study sweeps each
checkpoint once per sweep, choosing the transfer methods before it reads test."""

from __future__ import annotations

import json

import pytest
from helpers import untrained_checkpoint

from benchmarks import protocol, study

RULE_A = dict(pos_lr_scale=30.0, pos_weight_decay=0.3, pos_decay_to="start", pos_lr_warmup_epochs=5.0)
RULE_B = dict(pos_lr_scale=1.0, pos_weight_decay=0.0, pos_decay_to="none", pos_lr_warmup_epochs=0.0)
RULE_C = dict(pos_lr_scale=10.0, pos_weight_decay=0.0, pos_decay_to="none", pos_lr_warmup_epochs=0.0)


def run(spec, seed, rule, val, test=0.5, **more):
    return {"spec": spec, "seed": seed, "pos_params": True, **rule, "best_val_top1": val, "test_top1": test, **more}


def test_the_rule_is_chosen_on_validation_and_test_never_enters():
    runs = [run(f"s{i}:patch", seed, RULE_A, 0.9 + 0.01 * seed, test=0.1) for i in range(3) for seed in range(2)]
    runs += [run(f"s{i}:patch", seed, RULE_B, 0.8, test=0.99) for i in range(3) for seed in range(2)]
    chosen = protocol.choose_rule(runs, min_pairs=5)
    assert chosen["chosen"] == RULE_A  # above on validation, though far below on test
    flipped = [r | {"best_val_top1": r["test_top1"]} for r in runs]
    assert protocol.choose_rule(flipped, min_pairs=5)["chosen"] == RULE_B  # the choice moves only with validation
    (row,) = [t for t in chosen["comparisons"] if t["rule"] == RULE_A]
    assert (row["pairs"], row["wins"], row["losses"]) == (6, 6, 0)


def test_the_chosen_rules_comparisons_carry_a_paired_interval_corrected_together():
    gains = [0.05, 0.06, 0.04, 0.05, 0.07, 0.05]
    runs = [run(f"s{i}:patch", 0, RULE_A, 0.9 + g) for i, g in enumerate(gains)]
    runs += [run(f"s{i}:patch", 0, RULE_B, 0.9) for i in range(6)]
    runs += [run(f"s{i}:patch", 0, RULE_C, 0.9 + g + (0.02 if i % 2 else -0.03)) for i, g in enumerate(gains)]
    chosen = protocol.choose_rule(runs, min_pairs=5)
    assert chosen["chosen"] == RULE_A
    rows = {t["other"]["pos_lr_scale"]: t for t in chosen["comparisons"] if t["rule"] == RULE_A}
    strong, weak = rows[1.0], rows[10.0]
    assert strong["holm"]["verdict"] == "above" and strong["holm"]["low"] > 0
    # Holm widens each interval beyond its own 95 % one; a gain the runs do not settle is said to be so.
    assert strong["holm"]["low"] < strong["low"] and strong["holm"]["high"] > strong["high"]
    assert weak["holm"]["verdict"] == "not separated" and weak["holm"]["low"] < 0 < weak["mean_diff"]
    assert all("holm" not in t for t in chosen["comparisons"] if t["rule"] != RULE_A)  # one family: the page's


def rule_record(tmp_path, runs, name="rules.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"command": "python -m benchmarks.results", "runs": runs}))
    return path


def test_only_runs_naming_their_machine_and_commit_choose_and_they_name_one_of_each(tmp_path):
    stamp = {"hardware": "1 x CPU", "commit": "abc"}
    runs = [run(f"s{i}:patch", 0, RULE_A, 0.95, **stamp) for i in range(5)]
    runs += [run(f"s{i}:patch", 0, RULE_B, 0.90, **stamp) for i in range(5)]
    runs += [run("o:patch", 0, RULE_A, 0.99, **stamp)]
    unstamped = [run(f"s{i}:patch", 0, RULE_B, 0.99) for i in range(5, 10)]  # would carry B if they voted
    unstamped += [run(f"s{i}:patch", 0, RULE_A, 0.10, hardware="1 x CPU") for i in range(5, 10)]
    unstamped += [run("x:patch", 0, RULE_A, 1.0, hardware="1 x CPU")]
    out = tmp_path / "protocol.json"
    args = ["--runs", str(rule_record(tmp_path, runs + unstamped)), "--json", str(out), "--top", "1"]
    assert protocol.main(args) == 0
    proto = json.loads(out.read_text())
    assert proto["rule"]["chosen"] == RULE_A
    assert (proto["evidence"]["runs"], proto["evidence"]["left_out"]) == (11, 11)
    assert proto["top_others"]["chosen"] == ["o:patch"]  # x names no commit
    for other in ({"hardware": "1 x GPU", "commit": "abc"}, {"hardware": "1 x CPU", "commit": "def"}):
        mixed = runs + [run("t:patch", 0, RULE_A, 0.9, **other)]
        with pytest.raises(SystemExit):
            protocol.main(["--runs", str(rule_record(tmp_path, mixed)), "--json", str(out)])


def test_no_rule_is_chosen_without_enough_shared_runs_or_a_rule_above_all_others():
    runs = [run("s:patch", seed, RULE_A, 0.9) for seed in range(3)] + [run("s:patch", seed, RULE_B, 0.8)
                                                                       for seed in range(3)]  # fmt: skip
    assert protocol.choose_rule(runs, min_pairs=5)["chosen"] is None  # 3 pairs < 5
    tied = [run("s:patch", seed, rule, 0.9) for seed in range(5) for rule in (RULE_A, RULE_B)]
    assert protocol.choose_rule(tied, min_pairs=5)["chosen"] is None


def test_runs_with_scheme_options_do_not_vote_for_the_rule_and_the_start_is_chosen_apart():
    runs = [run("relbias:patch", s, RULE_A, 0.99) for s in range(3)]
    runs += [run("relbias:patch", 1, RULE_A, 0.40, pos_kwargs={"locality": 0})]
    assert all(k[0] == "relbias:patch" for k in protocol.val_by_rule(runs)[tuple(RULE_A.values())])
    assert len(protocol.val_by_rule(runs)[tuple(RULE_A.values())]) == 3
    start = protocol.choose_start(runs, RULE_A)
    assert (start["chosen"], start["seeds"]) == (1, [1])


def test_the_start_is_chosen_over_the_seeds_both_starts_have_with_its_paired_difference():
    runs = [run("relbias:patch", s, RULE_A, v) for s, v in ((0, 0.99), (1, 0.97), (2, 0.2))]
    runs += [run("relbias:patch", s, RULE_A, v, pos_kwargs={"locality": 0}) for s, v in ((0, 0.5), (1, 0.3))]
    start = protocol.choose_start(runs, RULE_A)
    assert (start["chosen"], start["seeds"]) == (1, [0, 1])  # seed 2 has one start only: it does not vote
    d = start["difference"]
    assert d["diff"] == pytest.approx(0.58) and d["low"] < d["diff"] < d["high"]


def test_top_others_are_ranked_by_seed_0_validation_outside_the_main_runs():
    runs = [
        run("a:patch", 0, RULE_A, 0.95),
        run("b:patch", 0, RULE_A, 0.99),
        run("c:patch", 0, RULE_A, 0.97),
        run("b:patch", 1, RULE_A, 0.10),
        run("main:patch", 0, RULE_A, 1.0),
        run("d:patch", 0, RULE_B, 1.0),
    ]
    top = protocol.choose_top(runs, RULE_A, 2, ["main:patch"])
    assert top["chosen"] == ["b:patch", "c:patch"]


def record(scheme, method, size, top1, split="val", regime="zoom", seed=0):
    return {"scheme": scheme, "stem": "patch", "method": method, "resolution": size, "top1": top1, "split": split,
            "regime": regime, "seed": seed}  # fmt: skip


def swept(ckpt, split: str, methods=None) -> list[dict]:
    """What a sweep of one rope2d checkpoint returns: two methods at 64 px, every image of the split counted."""
    n = 1000 if split == "val" else 2000  # the study's --val-limit, the test split
    return [
        record("rope2d", m, 64, v, split=split) | {"checkpoint": str(ckpt), "samples": n}
        for m, v in (("extrapolate", 0.4), ("interpolate", 0.6))
        if methods is None or m in methods
    ]


def test_methods_are_chosen_on_validation_at_the_new_sizes_only():
    recs = [record("rope2d", "extrapolate", 32, 1.0), record("rope2d", "interpolate", 32, 0.5),  # training size
            record("rope2d", "extrapolate", 64, 0.4), record("rope2d", "interpolate", 64, 0.6),
            record("rope2d", "extrapolate", 64, 0.3, regime="canvas"),
            record("rope2d", "interpolate", 64, 0.5, regime="canvas"),
            record("rope2d", "extrapolate", 64, 0.99, split="test")]  # fmt: skip
    chosen = study.choose_methods(recs, 32)["rope2d:patch"]
    assert chosen["method"] == "interpolate" and chosen["val_mean"]["extrapolate"] == pytest.approx(0.35)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A study rooted at ``tmp_path`` with one finished rope2d run (its checkpoint's bytes stand in for weights)."""
    from benchmarks import common

    monkeypatch.setattr(study, "ROOT", tmp_path)
    monkeypatch.setattr(common, "ROOT", tmp_path)
    run_dir = tmp_path / "runs" / "rope2d-patch-seed0"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    monkeypatch.setattr(study, "shuffle_row", lambda ckpt: {"top1": 0.9, "top1_shuffled": 0.2, "drop": 0.7})
    return run_dir


@pytest.fixture
def trained(tmp_path, monkeypatch) -> dict:
    """A study rooted at ``tmp_path`` whose trainings are recorded (folder name -> train.py flags), not run."""
    from benchmarks import common

    monkeypatch.setattr(study, "ROOT", tmp_path)
    monkeypatch.setattr(common, "ROOT", tmp_path)
    flags_of = {}

    def train_run(rd, flags, retrain=False):
        flags_of[rd.name] = flags
        return {"run": str(rd.relative_to(tmp_path))}

    monkeypatch.setattr(study, "train_run", train_run)
    return flags_of


def test_study_sweeps_each_checkpoint_once_and_chooses_before_test(tmp_path, monkeypatch, run_dir):

    def train_run(rd, flags, retrain=False):
        return {"run": str(rd.relative_to(tmp_path)), "best_val_top1": 0.9, "test_top1": 0.9, "commit": "abc"}

    calls = []

    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        calls.append(split if not control else f"control {methods[0]} {sorted(control.items())}")
        if split == "test":  # by now the choice must be on disk
            assert json.loads(out.read_text())["choices"]["rope2d:patch"]["method"] == "interpolate"
        return swept(ckpt, split)

    monkeypatch.setattr(study, "train_run", train_run)
    monkeypatch.setattr(study, "sweep_checkpoint", sweep)
    monkeypatch.setattr(study, "entropy_rows", lambda ckpt, method, sizes: [{"method": method, "entropy": [[1.0]]}])
    out = tmp_path / "study.json"
    argv = [
        "--runs",
        "rope2d:patch",
        "--seeds",
        "0",
        "--out",
        "runs",
        "--json",
        str(out),
        "--sizes",
        "32",
        "64",
        "--no-controls",
        "--far",
        "--finetune",
    ]
    assert study.main(argv) == 0
    assert calls == ["val", "test"]
    data = json.loads(out.read_text())
    assert {r["split"] for r in data["records"]} == {"val", "test"}
    assert all(r["ckpt_sha256"] and r["train_commit"] == "abc" and r["device"] for r in data["records"])
    assert study.main(argv) == 0 and calls == ["val", "test"]  # unchanged checkpoint: nothing swept again
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"retrained")
    assert study.main(argv) == 0 and calls == ["val", "test", "val", "test"]
    data = json.loads(out.read_text())
    assert len(data["records"]) == 4  # the old checkpoint's records replaced, not kept
    (shuffled,) = data["shuffle"]  # one patch-shuffle test per run, of its current checkpoint
    assert shuffled["drop"] == 0.7 and shuffled["ckpt_sha256"] == data["records"][-1]["ckpt_sha256"]
    assert shuffled["spec"] == "rope2d:patch" and shuffled["device"]


def test_study_sweeps_the_canvas_controls_with_the_chosen_method_above_the_training_size(
    tmp_path, monkeypatch, run_dir
):
    monkeypatch.setattr(study, "train_run", lambda rd, flags, retrain=False: {"run": str(rd.relative_to(tmp_path))})
    seen = []

    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        seen.append((split, tuple(sizes), methods, regimes, tuple(sorted(control.items()))))
        return swept(ckpt, split, methods)

    monkeypatch.setattr(study, "sweep_checkpoint", sweep)
    entropies = []
    monkeypatch.setattr(study, "entropy_rows", lambda ckpt, method, sizes: entropies.append(method) or [{}])
    out = tmp_path / "study.json"
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "--out", "runs", "--json", str(out), "--sizes", "32", "64",
            "--far", "--finetune"]  # fmt: skip
    assert study.main(argv) == 0
    assert entropies == ["interpolate"]  # the chosen method, once per checkpoint
    controls = seen[2:]
    assert [c[4] for c in controls] == [(("pool", "scene"),), (("logit_scaling", "logn"),), (("shift", "half-patch"),)]
    assert all(c[:4] == ("test", ("64",), ["interpolate"], ("canvas",)) for c in controls)
    data = json.loads(out.read_text())
    assert {r.get("control") for r in data["records"]} == {None, "scene", "logn", "offgrid"}
    earlier = data["records"][-1] | {
        "method": "extrapolate",
        "sweep": data["records"][-1]["sweep"] | {"method": "extrapolate"},
    }
    out.write_text(json.dumps(data | {"records": data["records"] + [earlier]}))  # a control of an earlier choice
    assert study.main(argv) == 0 and len(seen) == 5
    assert all(r["method"] == "interpolate" for r in json.loads(out.read_text())["records"] if r.get("control"))
    assert entropies == ["interpolate"]  # nothing swept twice
    assert json.loads(out.read_text())["entropy"][0]["spec"] == "rope2d:patch"


def test_far_sizes_are_tested_once_after_the_choice_with_the_chosen_method_only(tmp_path, monkeypatch, run_dir):
    from benchmarks.pages import summary

    monkeypatch.setattr(study, "train_run", lambda rd, flags, retrain=False: {"run": str(rd.relative_to(tmp_path))})
    seen = []

    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        seen.append((split, tuple(sizes), limit, methods, regimes))
        if sizes != ["128"]:
            return swept(ckpt, split, methods)
        assert json.loads(out.read_text())["choices"]["rope2d:patch"]["method"] == "interpolate"
        return [record("rope2d", m, 128, 0.3, split=split, regime=g) | {"checkpoint": str(ckpt), "samples": 2000}
                for m in methods for g in regimes]  # fmt: skip

    monkeypatch.setattr(study, "sweep_checkpoint", sweep)
    monkeypatch.setattr(study, "entropy_rows", lambda ckpt, method, sizes: [{}])
    out = tmp_path / "study.json"
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "--out", "runs", "--json", str(out), "--sizes", "32", "64",
            "--no-controls", "--far", "128", "--finetune"]  # fmt: skip
    assert study.main(argv) == 0
    assert seen[2:] == [("test", ("128",), None, ["interpolate"], ("zoom", "canvas"))]  # whole split, one method
    assert study.main(argv) == 0 and len(seen) == 3  # recorded: not swept again
    data = json.loads(out.read_text())
    data["budget"] = {"img_size": 32}
    data["runs"] = [{"spec": "rope2d:patch", "seed": 0, "run": "runs/rope2d-patch-seed0"}]
    cells = summary.Study(data)
    assert cells.values("rope2d:patch", ("zoom", 4.0)) == {0: 0.3} == cells.values("rope2d:patch", ("canvas", 4.0))


@pytest.mark.parametrize(
    ("flags", "far", "finetune"),
    [
        ([], study.FAR, study.FINETUNE_SIZES),  # both run by default
        (["--no-far", "--no-finetune"], [], []),
        (["--far", "--finetune"], [], []),  # the recorded commands' form: an empty list skips too
        (["--far", "96", "--no-finetune"], ["96"], []),
    ],
)
def test_far_sizes_and_fine_tuning_are_skipped_by_name_or_by_an_empty_list(tmp_path, trained, flags, far, finetune):
    out = tmp_path / "study.json"
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "--out", "runs", "--json", str(out), "--no-controls", *flags]
    assert study.main(argv) == 0
    data = json.loads(out.read_text())
    assert (data["far"], data["finetune"]) == (far, finetune)


def test_test_methods_chosen_tests_the_chosen_method_only_and_keeps_an_earlier_test_of_every_method(
    tmp_path, monkeypatch, run_dir
):
    monkeypatch.setattr(study, "train_run", lambda rd, flags, retrain=False: {"run": str(rd.relative_to(tmp_path))})
    seen = []

    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        seen.append((split, methods))
        return swept(ckpt, split, methods)

    monkeypatch.setattr(study, "sweep_checkpoint", sweep)
    monkeypatch.setattr(study, "entropy_rows", lambda ckpt, method, sizes: [{}])
    out = tmp_path / "study.json"
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "--out", "runs", "--json", str(out), "--sizes", "32", "64",
            "--no-controls", "--far", "--finetune"]  # fmt: skip
    assert study.main([*argv, "--test-methods", "chosen"]) == 0
    assert seen == [("val", None), ("test", ["interpolate"])]
    tested = [r for r in json.loads(out.read_text())["records"] if r["split"] == "test"]
    assert [r["method"] for r in tested] == ["interpolate"] and tested[0]["sweep"]["method"] == "interpolate"
    out.unlink()
    seen.clear()
    assert study.main(argv) == 0 and seen == [("val", None), ("test", None)]  # every method
    assert study.main([*argv, "--test-methods", "chosen"]) == 0 and len(seen) == 2  # the chosen one is among them


def test_each_run_is_fine_tuned_once_per_checkpoint_from_its_last_checkpoint_and_tested_there(
    tmp_path, monkeypatch, run_dir
):
    trained = []

    def train_run(rd, flags, retrain=False):
        trained.append((rd, flags))
        return {"run": str(rd.relative_to(tmp_path)), "test_top1": 0.8, "hardware": "1 x CPU", "commit": "abc",
                "ckpt_sha256": "f" * 64}  # fmt: skip

    monkeypatch.setattr(study, "train_run", train_run)
    monkeypatch.setattr(study, "sweep_checkpoint", lambda ckpt, split, *a, **k: swept(ckpt, split))
    monkeypatch.setattr(study, "entropy_rows", lambda ckpt, method, sizes: [{}])
    start = None  # a scheme that carries a grid-sized state (the checkpoint's bytes are no model here)
    monkeypatch.setattr(study, "fine_tune_start", lambda ckpt: start)
    out = tmp_path / "study.json"
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "--out", "runs", "--json", str(out), "--sizes", "32", "64",
            "--no-controls", "--far"]  # fmt: skip
    assert study.main(argv) == 0  # --finetune: 64 px by default
    (first, _), (folder, flags) = trained  # the run itself, then its fine-tuning
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    assert flags[:6] == ["--init-from", str(ckpt), "--img-size", "64", "--seed", "0"]
    assert (
        flags[6:] == study.FINETUNE
        and folder.parent.name == "finetune"
        and folder.name.endswith(f"-seed0-ft64-{study.FINETUNE_SLUG}")
    )
    (row,) = json.loads(out.read_text())["finetuned"]
    assert row["size"] == 64 and row["top1"] == 0.8 and row["spec"] == "rope2d:patch" and row["seed"] == 0
    assert "start" not in row
    start = "interpolate"  # now it keeps its training grid: the run it made rebuilt the scheme, and is made again
    assert study.main(argv) == 0 and len(trained) == 4
    assert trained[-1][0].name.endswith(f"-seed0-ft64-from-interpolate-{study.FINETUNE_SLUG}")  # a folder apart
    (row,) = json.loads(out.read_text())["finetuned"]
    assert row["start"] == "interpolate"
    trained[2:] = []  # as before the scheme kept its grid
    assert row["from_sha256"] == study.fingerprint(ckpt) and row["ckpt_sha256"] == "f" * 64
    assert json.loads(out.read_text())["finetune_recipe"] == study.FINETUNE
    assert study.main(argv) == 0 and len(trained) == 3  # the run is looked up again; its fine-tuning is recorded
    ckpt.write_bytes(b"retrained")
    assert study.main(argv) == 0 and len(trained) == 5  # a new checkpoint is fine-tuned again and replaces the row
    (row,) = json.loads(out.read_text())["finetuned"]
    assert row["from_sha256"] == study.fingerprint(ckpt)
    ckpt.write_bytes(b"retrained again")
    assert study.main([*argv, "--seeds", "1"]) == 0  # seed 0 is not among the seeds asked for: not fine-tuned
    assert [rd.parent.name for rd, _ in trained[5:]] == ["runs"]  # seed 1's run looked up, nothing fine-tuned


def test_a_study_on_another_data_set_and_size_trains_tunes_and_chooses_there(tmp_path, monkeypatch, capsys):
    from benchmarks import common

    monkeypatch.setattr(study, "ROOT", tmp_path)
    monkeypatch.setattr(common, "ROOT", tmp_path)
    (tmp_path / "fm.yaml").write_text("data:\n  name: fashion-mnist\n  train_limit: 500\n  holdout_size: 300\n")
    trained = []

    def train_run(rd, flags, retrain=False):
        trained.append((rd.name, flags))
        (rd / "checkpoints").mkdir(parents=True, exist_ok=True)
        (rd / "checkpoints" / "last.ckpt").write_bytes(rd.name.encode())
        return {"run": str(rd.relative_to(tmp_path)), "test_top1": 0.7}

    counted = []
    monkeypatch.setattr(
        study, "split_size", lambda cfg, split: counted.append(split) or {"val": 300, "test": 900}[split]
    )

    def sweep(ckpt, split, sizes, limit, methods=None, regimes=("zoom", "canvas"), **control):
        n = 300 if split == "val" else 900
        return [record("learned", m, 20, v, split=split) | {"checkpoint": str(ckpt), "samples": n}
                for m, v in (("bicubic", 0.6), ("extrapolate", 0.4)) if methods is None or m in methods]  # fmt: skip

    monkeypatch.setattr(study, "train_run", train_run)
    monkeypatch.setattr(study, "sweep_checkpoint", sweep)
    monkeypatch.setattr(study, "entropy_rows", lambda ckpt, method, sizes: [{}])
    monkeypatch.setattr(study, "shuffle_row", lambda ckpt: {"drop": 0.5})
    monkeypatch.setattr(study, "fine_tune_start", lambda ckpt: None)  # learned carries its table
    out = tmp_path / "fm.json"
    argv = ["--runs", "learned:patch", "--seeds", "0", "--out", "runs", "--json", str(out), "--config", "fm.yaml",
            "--img-size", "16", "--sizes", "12", "16", "20", "--far", "--finetune", "28", "--no-controls",
            "--rule", "off"]  # fmt: skip
    assert study.main(argv) == 0
    (name, flags), (tuned, ft_flags) = trained
    assert name == "learned-patch-lr1-seed0"  # the ablation: no position rule
    assert flags[:4] == ["--config", "fm.yaml", "--img-size", "16"] and "--pos-lr-scale" in flags
    assert flags[flags.index("--pos-lr-scale") + 1] == "1"
    assert ft_flags[:2] == ["--config", "fm.yaml"] and ft_flags[ft_flags.index("--img-size") + 1] == "28"
    data = json.loads(out.read_text())
    assert data["budget"]["img_size"] == 16 and data["budget"]["data"] == "fashion-mnist"
    assert data["budget"]["train_limit"] == 500 and data["budget"]["rule_pos_lr_scale"] == 1.0
    assert data["choices"]["learned:patch"]["method"] == "bicubic"
    assert len(data["records"]) == 4 and sorted(set(counted)) == ["test", "val"]  # cells counted against the set
    # the record resumes under its own settings only: the default rule or another size would mix two budgets
    kept = out.read_text()
    for other, says in ((argv[:-2], "budget.rule_pos_lr_scale"), ([*argv, "--img-size", "20"], "(budget.img_size)")):
        with pytest.raises(SystemExit):
            study.main(other)
        err = capsys.readouterr().err
        assert f"{out} holds a study made with other settings (" in err and says in err
    assert out.read_text() == kept and len(trained) == 2  # nothing trained, the record untouched
    for bad, says in ((["--img-size", "18"], "size 18 px is not a positive multiple of the patch size 4"),
                      (["--train-resolutions", "16", "30"], "size 30 px is not a positive multiple"),
                      (["--config", "nowhere.yaml"], "config file not found")):  # fmt: skip
        with pytest.raises(SystemExit):
            study.main(["--runs", "learned:patch", *bad])
        assert says in capsys.readouterr().err


def test_a_study_with_position_augmentation_trains_runs_of_their_own_and_records_it(tmp_path, trained, capsys):
    out = tmp_path / "aug.json"
    argv = ["--runs", "rope2d:patch", "learned:patch", "--seeds", "0", "--out", "runs", "--json", str(out),
            "--pos-aug", "rescale=2, shift=0.1", "--far", "--no-controls", "--finetune"]  # fmt: skip
    assert study.main(argv) == 0
    assert set(trained) == {"rope2d-patch-aug-shift0.1-rescale2-seed0",
                            "learned-patch-lr30-wd0.3-start-ramp5-aug-shift0.1-rescale2-seed0"}  # fmt: skip
    assert all(f[f.index("--pos-aug") + 1] == "shift=0.1,rescale=2" for f in trained.values())  # one text form
    data = json.loads(out.read_text())
    assert data["pos_aug"] == "rescale=2, shift=0.1" and {r["pos_aug"] for r in data["runs"]} == {"shift=0.1,rescale=2"}
    for bad, says in (("relbias:patch", "reads no patch coordinates"), ("rope2d:patch", "unknown position")):
        with pytest.raises(SystemExit):
            study.main(["--runs", bad, "--pos-aug", "spin=1" if says.startswith("unknown") else "shift=0.1"])
        assert says in capsys.readouterr().err


def test_a_multi_resolution_study_trains_runs_of_their_own_and_records_their_sizes(tmp_path, trained):
    out = tmp_path / "mr.json"
    argv = ["--runs", "rope2d:patch", "learned:patch", "--seeds", "0", "--out", "runs", "--json", str(out),
            "--train-resolutions", "16", "24", "32", "48", "--far", "--no-controls", "--finetune"]  # fmt: skip
    assert study.main(argv) == 0
    assert set(trained) == {
        "rope2d-patch-mr16-24-32-48-seed0",
        "learned-patch-lr30-wd0.3-start-ramp5-mr16-24-32-48-seed0",
    }
    assert all(f[f.index("--train-resolutions") :][1:5] == ["16", "24", "32", "48"] for f in trained.values())
    data = json.loads(out.read_text())
    assert data["train_resolutions"] == [16, 24, 32, 48]
    assert all(r["train_resolutions"] == [16, 24, 32, 48] for r in data["runs"])


def test_shuffle_row_finds_the_patch_stem_without_position_blind_to_patch_order(tmp_path):
    row = study.shuffle_row(untrained_checkpoint(tmp_path / "none.ckpt", pos="none", images=24))
    assert row["num_images"] == 24  # the whole test split
    assert row["top1"] == row["top1_shuffled"] and row["drop"] == 0.0  # a bag of patches: any order, same logits


def test_entropy_rows_measure_every_block_and_head_at_each_size_and_regime(tmp_path):
    import torch

    ckpt = untrained_checkpoint(tmp_path / "last.ckpt", images=8)
    rows = study.entropy_rows(ckpt, "interpolate", ["24", "32", "64"], images=4)
    assert [(r["regime"], r["resolution"]) for r in rows] == [("zoom", 24), ("zoom", 32), ("zoom", 64), ("canvas", 64)]
    for r in rows:
        h = torch.tensor(r["entropy"])
        assert h.shape == (2, 2) and (h > 0).all() and (h <= r["log_n"] + 1e-4).all() and r["images"] == 4


def test_a_cell_that_counted_fewer_images_than_asked_is_not_recorded(capsys):
    full = [{"samples": 2000}, {"samples": 2000}]
    assert study.complete(full, 2000, "ckpt") == full
    assert study.complete([{"samples": 2000}, {"samples": 1300}], 2000, "ckpt") == []
    assert "counted fewer than 2000 images" in capsys.readouterr().out


def test_a_fine_tuning_run_names_the_method_it_starts_from_where_it_keeps_the_schemes_grid(tmp_path):
    assert study.fine_tune_start(untrained_checkpoint(tmp_path / "rope.ckpt", "rope2d")) == "interpolate"
    assert study.fine_tune_start(untrained_checkpoint(tmp_path / "table.ckpt", "learned")) is None  # carried
