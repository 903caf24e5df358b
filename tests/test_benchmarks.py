"""The benchmarks' plumbing: runs and sweeps reused or made again, records kept, and what each study's page shows
of them (the pages alone: test_pages_records.py)."""

from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path

import pytest
from helpers import ROOT, record, rows, tables, transfer_record

from benchmarks.pages import __main__ as pages
from benchmarks.pages import common, fashion_mnist, pos_dynamics, resolution


@pytest.fixture
def bench(monkeypatch):
    from benchmarks import common

    return common


@pytest.mark.parametrize("script", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__"))
def test_every_benchmark_imports(bench, script):
    """No test runs the benchmarks themselves: importing each at least finds every name it takes from vitpos."""
    importlib.import_module(f"benchmarks.{script}")


def test_a_finished_sweep_is_reused_only_when_command_and_checkpoints_match(bench, tmp_path):
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(b"weights")
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    cmd = ["-m", "vitpos.evaluate", "--ckpt", str(ckpt), "--resolutions", "32", "64"]
    assert not bench.finished_sweep(cmd, [str(ckpt)], sweep_dir)  # nothing there yet
    (sweep_dir / "resolution.json").write_text("[]")
    assert not bench.finished_sweep(cmd, [str(ckpt)], sweep_dir)  # results without a manifest
    (sweep_dir / "command.json").write_text(json.dumps(cmd))  # the manifest transfer_study writes
    old = (sweep_dir / "resolution.json").stat().st_mtime - 10
    os.utime(ckpt, (old, old))
    assert bench.finished_sweep(cmd, [str(ckpt)], sweep_dir)
    assert not bench.finished_sweep([*cmd, "96"], [str(ckpt)], sweep_dir)  # another command
    new = old + 20
    os.utime(ckpt, (new, new))
    assert not bench.finished_sweep(cmd, [str(ckpt)], sweep_dir)  # retrained after the sweep


def test_a_transfer_study_sweeps_only_checkpoints_it_has_not_measured(bench, tmp_path, monkeypatch):
    """Records of an unchanged checkpoint (same bytes, same sweep) are kept; a new or retrained one is swept."""
    runs = []
    for pos, seed in (("learned", 0), ("rope2d", 0)):
        (tmp_path / f"{pos}-seed{seed}" / "checkpoints").mkdir(parents=True)
        (tmp_path / f"{pos}-seed{seed}" / "checkpoints" / "last.ckpt").write_bytes(pos.encode())
        runs.append({"pos": pos, "stem": "patch", "seed": seed, "run": str(tmp_path / f"{pos}-seed{seed}")})
    swept, measured = [], []

    def evaluate(cmd):  # the evaluator's part: one record per checkpoint and resolution
        ckpts = cmd[cmd.index("--ckpt") + 1 : cmd.index("--resolutions")]
        sizes = cmd[cmd.index("--resolutions") + 1 : cmd.index("--split")]
        swept.append([Path(c).parents[1].name for c in ckpts])
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(exist_ok=True)
        recs = [transfer_record("x", int(s), 0.5, 0, c) for c in ckpts for s in sizes]
        (out / "resolution.json").write_text(json.dumps(recs))

    def temperatures(ckpts, grids, limit):
        measured.append([Path(c).parents[1].name for c in ckpts])
        return [{"checkpoint": c, "temperature": "axis", "resolution": g, "top1": 0.5} for c in ckpts for g in grids]

    monkeypatch.setattr(bench, "run", lambda cmd: evaluate(cmd[1:]))
    monkeypatch.setattr(bench, "temperature_study", temperatures)
    study = bench.transfer_study
    first = study(runs, ["32", "64"], 300, tmp_path / "sweep", ["64"])
    assert swept == [["learned-seed0", "rope2d-seed0"]] and measured == [["rope2d-seed0"]]
    assert all(len(r["checkpoint_sha256"]) == 64 for r in first["records"] + first["yarn_temperature"])
    again = study(runs, ["32", "64"], 300, tmp_path / "sweep", ["64"], earlier=first)
    assert len(swept) == 1 and len(measured) == 1  # nothing new to measure
    assert sorted(map(json.dumps, again["records"])) == sorted(map(json.dumps, first["records"]))
    assert again["yarn_temperature"] == first["yarn_temperature"]
    (tmp_path / "learned-seed0" / "checkpoints" / "last.ckpt").write_bytes(b"retrained")
    third = study(runs, ["32", "64"], 300, tmp_path / "sweep", ["64"], earlier=first)
    assert swept[-1] == ["learned-seed0"] and len(measured) == 1
    assert len(third["records"]) == 4 and len({r["checkpoint_sha256"] for r in third["records"]}) == 2
    study(runs, ["32", "96"], 300, tmp_path / "sweep", ["64"], earlier=third)  # another sweep: every checkpoint
    assert swept[-1] == ["learned-seed0", "rope2d-seed0"]
    study(runs, ["32", "96"], 100, tmp_path / "sweep", ["64", "96"], earlier=third)
    assert measured[-1] == ["rope2d-seed0"]  # another image count and grid: the temperatures again


def test_diagnostics_takes_each_schemes_seed_0_run_at_the_default_rule(bench, tmp_path, monkeypatch):
    from benchmarks import diagnostics

    runs = [("rope2d-patch-seed0", 0, 30.0), ("learned-patch-lr30-seed0", 0, 30.0),  # rope2d: no lr in its name
            ("learned-patch-lr30-seed1", 1, 30.0), ("learned-patch-lr1-seed0", 0, 1.0),
            ("relbias-patch-lr30-seed0", 0, 30.0)]  # fmt: skip
    results = {
        "budget": {"default_pos_lr_scale": 30.0, "default_pos_weight_decay": 0.0},
        "runs": [{"run": str(tmp_path / "runs" / name), "seed": seed, "pos_lr_scale": scale, "pos_params": True}
                 for name, seed, scale in runs],
    }  # fmt: skip
    decayed = {"run": str(tmp_path / "runs" / "learned-patch-lr30-wd0.3-seed0"), "seed": 0, "pos_lr_scale": 30.0,
               "pos_weight_decay": 0.3}  # fmt: skip
    results["runs"].append(decayed)  # not the default rule
    (tmp_path / "results.json").write_text(json.dumps(results))
    for name, *_ in runs[:4]:  # relbias's checkpoint is gone: it keeps its earlier record
        (tmp_path / "runs" / name / "checkpoints").mkdir(parents=True)
        (tmp_path / "runs" / name / "checkpoints" / "last.ckpt").touch()
    shuffled = {"top1": 0.9, "top1_shuffled": 0.1, "drop": 0.8}
    earlier = {
        "run": "relbias-patch-lr30-seed0",
        "patch_shuffle": shuffled,
        "pictures": [],
        "attention_distance": [2.0],
    }
    (tmp_path / "diagnostics.json").write_text(json.dumps(record(num_images=8, runs=[earlier])))
    seen = []

    def diagnose(ckpt, out, num_images, overwrite):
        seen.append(Path(ckpt).parent.parent.name)
        return {"patch_shuffle": {"top1": 0.5, "top1_shuffled": 0.25, "drop": 0.25},
                "pictures": ["attention_distance.png"], "mean_attention_distance_per_block": [3.0, 4.0]}  # fmt: skip

    monkeypatch.setattr(diagnostics, "diagnose", diagnose)
    argv = ["--results", str(tmp_path / "results.json"), "--docs", str(tmp_path), "--num-images", "8"]
    assert diagnostics.main(argv) == 0
    assert seen == ["rope2d-patch-seed0", "learned-patch-lr30-seed0"]
    page = pages.PAGES["diagnostics"](json.loads((tmp_path / "diagnostics.json").read_text()), tmp_path)
    assert [row[:5] for row in rows(page)[1:]] == [
        ["`rope2d-patch-seed0`", "50.0 %", "25.0 %", "+25.0 pts", "3.00 / 4.00"],
        ["`learned-patch-lr30-seed0`", "50.0 %", "25.0 %", "+25.0 pts", "3.00 / 4.00"],
        ["`relbias-patch-lr30-seed0`", "90.0 %", "10.0 %", "+80.0 pts", "2.00 / 2.00"],
    ]
    ran = common.rule_words((30.0, 0.0, "none", 0.0))
    assert ran in page and page.count("position parameters at lr x") == 1  # the default's runs: no other rule named
    # a gone checkpoint with no earlier record: a one-line error, not a page without it
    (tmp_path / "diagnostics.json").write_text(json.dumps(record(num_images=8, runs=[])))
    with pytest.raises(SystemExit):
        diagnostics.main(argv)


def test_resolution_study_keeps_the_records_of_runs_whose_checkpoints_are_gone(bench, tmp_path, monkeypatch):
    from benchmarks import resolution_transfer as rt

    here = tmp_path / "runs" / "a-seed0" / "checkpoints" / "last.ckpt"
    extra = tmp_path / "runs" / "a-seed3" / "checkpoints" / "last.ckpt"
    for ckpt in (here, extra):
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"weights")
    gone = tmp_path / "runs" / "b-seed1" / "checkpoints" / "last.ckpt"
    monkeypatch.setattr(rt, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    budget = {"default_pos_lr_scale": 30.0, "default_pos_weight_decay": 0.0, "embed_dim": 128, "num_heads": 4,
              "img_size": 32, "patch_size": 4}  # fmt: skip
    runs = [{"run": "runs/a-seed0", "seed": 0, "pos_lr_scale": 30.0, "pos_weight_decay": 0.0},
            {"run": "runs/b-seed1", "seed": 1, "pos_lr_scale": 30.0, "pos_weight_decay": 0.0},
            {"run": "runs/c-decayed", "seed": 0, "pos_lr_scale": 30.0, "pos_weight_decay": 0.3},
            {"run": "runs/a-seed3", "seed": 3, "pos_lr_scale": 30.0, "pos_weight_decay": 0.0}]  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps({"budget": budget, "runs": runs}))
    earlier = {
        "records": [transfer_record("b", 48, 0.5, 1, str(gone)), transfer_record("a", 48, 0.1, 0, str(here))],
        "yarn_temperature": [{"checkpoint": str(gone), "temperature": "axis", "resolution": "48", "top1": 0.3}],
    }
    (tmp_path / "resolution.json").write_text(json.dumps(earlier))
    swept = []

    def transfer_study(runs, **settings):
        swept.extend(r["run"] for r in runs)
        return {"records": [transfer_record("a", 96, 0.2, 0, str(here))], "yarn_temperature": []}

    monkeypatch.setattr(rt, "transfer_study", transfer_study)
    argv = ["--results", str(tmp_path / "results.json"), "--json", str(tmp_path / "resolution.json")]
    assert rt.main(argv) == 0
    assert swept == ["runs/a-seed0"]  # here; the decayed run is not at the default rule, seed 3 not in --seeds
    out = json.loads((tmp_path / "resolution.json").read_text())
    assert [(r["scheme"], r["height"]) for r in out["records"]] == [("a", 96), ("b", 48)]  # the new sweep replaces a's
    assert [t["checkpoint"] for t in out["yarn_temperature"]] == [str(gone)]


def fake_fashion_mnist_training(fm, tmp_path: Path, monkeypatch) -> list[str]:
    """fashion_mnist's training and sweep replaced by stubs; the names of the runs it trains, as it trains them."""
    trained = []

    def train_run(run_dir, flags):
        trained.append(run_dir.name)
        (run_dir / "logs").mkdir(parents=True)
        (run_dir / "logs" / "metrics.csv").write_text("val/top1\n0.4\n")
        return {"run": str(run_dir.relative_to(tmp_path)), "test_top1": 0.4}

    monkeypatch.setattr(fm, "train_run", train_run)
    monkeypatch.setattr(fm, "transfer_study", lambda runs, **kw: {"records": [], "yarn_temperature": []})
    return trained


@pytest.mark.parametrize("same_budget", [True, False])
def test_fashion_mnist_study_reuses_recorded_runs_whose_folders_are_gone_at_the_same_budget(
    bench, tmp_path, monkeypatch, same_budget
):
    from benchmarks import fashion_mnist as fm

    monkeypatch.setattr(fm, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(fm, "CONFIG", str(ROOT / fm.CONFIG))
    recorded = {"pos": "rope2d", "stem": "patch", "seed": 0, "run": "fm/rope2d-patch-seed0", "test_top1": 0.8,
                "val_curve": [0.5, 0.8]}  # fmt: skip
    budget = fm.study_of(300) | ({} if same_budget else {"epochs": fm.study_of(300)["epochs"] // 2})
    earlier = {"budget": budget, "runs": [recorded], "records": [], "yarn_temperature": []}
    (tmp_path / "fm.json").write_text(json.dumps(earlier))
    trained = fake_fashion_mnist_training(fm, tmp_path, monkeypatch)
    out = ["--out", "fm", "--json", str(tmp_path / "fm.json")]
    argv = ["--runs", "rope2d:patch", "learned:patch", "--seeds", "0", "--single", *out]
    assert fm.main(argv) == 0
    runs = json.loads((tmp_path / "fm.json").read_text())["runs"]
    learned = bench.run_name("learned", "patch", 0, {k: budget[k] for k in fm.POS_RULE})  # named by its rule
    if same_budget:
        assert trained == [learned]  # the recorded rope2d run is not trained again
        assert runs[0] == recorded and runs[1]["val_curve"] == [0.4]
    else:  # a record made at another budget is not this study's: both runs are trained
        assert trained == ["rope2d-patch-seed0", learned]
        assert [r["val_curve"] for r in runs] == [[0.4], [0.4]]


def test_fashion_mnist_study_under_another_rule_reuses_only_the_schemes_without_position_parameters(
    bench, tmp_path, monkeypatch
):
    """A record made under another position rule (an older one names only the scale) still holds the runs of
    schemes the rule does not touch; the schemes with position parameters train again."""
    from benchmarks import fashion_mnist as fm

    monkeypatch.setattr(fm, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(fm, "CONFIG", str(ROOT / fm.CONFIG))
    budget = {k: v for k, v in fm.study_of(300).items() if k not in fm.POS_RULE} | {"pos_lr_scale": 1.0}
    runs = [{"pos": pos, "stem": "patch", "seed": 0, "run": f"fm/{pos}-patch-seed0", "test_top1": 0.8,
             "val_curve": [0.5, 0.8]} for pos in ("rope2d", "learned")]  # fmt: skip
    (tmp_path / "fm.json").write_text(json.dumps({"budget": budget, "runs": runs}))
    trained = fake_fashion_mnist_training(fm, tmp_path, monkeypatch)
    argv = ["--runs", "rope2d:patch", "learned:patch", "--seeds", "0", "--single", "--out", "fm",
            "--json", str(tmp_path / "fm.json")]  # fmt: skip
    (tmp_path / "fm" / "learned-patch-seed0").mkdir(parents=True)  # the old rule's finished run: not reused
    (tmp_path / "fm" / "learned-patch-seed0" / "results.json").write_text("{}")
    assert fm.main(argv) == 0
    rule = {k: fm.study_of(300)[k] for k in fm.POS_RULE}
    assert trained == [bench.run_name("learned", "patch", 0, rule)] != ["learned-patch-seed0"]
    written = json.loads((tmp_path / "fm.json").read_text())
    assert written["runs"][0] == runs[0] and written["runs"][1]["test_top1"] == 0.4
    o = fm.Config.from_yaml(ROOT / fm.CONFIG).optim  # the new record names every field of the study's rule
    now = fm.pos_rule_of(vars(o))
    assert {k: written["budget"][k] for k in fm.POS_RULE} == now and now["pos_lr_scale"] != 1.0


def test_fashion_mnist_page_says_where_its_runs_differ_from_the_defaults(bench, tmp_path):
    """Runs under another rule than the default, or with scheme options, are named as such, with the command that
    trains the defaults; at the defaults the page says nothing of the kind."""
    from benchmarks.rules import POS_RULE

    d = json.loads((ROOT / "docs" / "fashion_mnist.json").read_text())
    o = fashion_mnist.Config().optim
    d["budget"] |= dict(zip(POS_RULE, (o.pos_lr_scale, o.pos_weight_decay, o.pos_decay_to, o.pos_lr_warmup_epochs)))
    d["runs"] = [r | {"pos_kwargs": {}} for r in d["runs"]]
    command = f"`{d['command']}`"
    page = fashion_mnist.render(d, tmp_path)
    assert page.count(command) == 1  # only under the title: nothing to train again
    d["runs"][0]["pos_kwargs"] = {"theta": 10}
    page = fashion_mnist.render(d, tmp_path)
    named = common.label(common.scheme_of(d["runs"][0]), "patch")  # e.g. `rope2d` (theta=10)
    assert named in page and page.count(command) == 2  # the runs with options named, and the command that retrains
    assert page.count("position parameters at lr x") == 1  # the one rule: these runs' and the default
    d["budget"]["pos_lr_warmup_epochs"] = o.pos_lr_warmup_epochs + 1
    page = fashion_mnist.render(d, tmp_path)
    now, ran = (common.rule_words(common.run_rule(r)) for r in (vars(o), d["budget"]))
    assert now in page and ran in page and now != ran and page.count(command) == 2


def finetune_here(bench, tmp_path: Path, monkeypatch, runs: list[dict]):
    """benchmarks/finetune.py with its root at ``tmp_path``, where ``runs`` (at the default rule) have checkpoints
    and a results.json records them (with one more run at another rule, which the study must skip)."""
    from benchmarks import finetune

    monkeypatch.setattr(finetune, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    for r in runs:
        (tmp_path / r["run"] / "checkpoints").mkdir(parents=True)
        (tmp_path / r["run"] / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    budget = {"default_pos_lr_scale": 30.0, "default_pos_weight_decay": 0.0, "img_size": 32}
    other = runs[0] | {"run": "runs/rope2d-patch-lr1-seed0", "pos_lr_scale": 1.0}  # not the default rule
    (tmp_path / "results.json").write_text(json.dumps({"budget": budget, "runs": [*runs, other]}))
    return finetune


def test_finetune_study_tests_directly_and_fine_tunes_each_run_and_renders(bench, tmp_path, monkeypatch):
    runs = [{"run": f"runs/rope2d-patch-seed{k}", "pos": "rope2d", "stem": "patch", "seed": k, "pos_lr_scale": 30.0,
             "pos_weight_decay": 0.0, "test_top1": 0.99} for k in (0, 1)]  # fmt: skip
    finetune = finetune_here(bench, tmp_path, monkeypatch, runs)
    trained = []

    def train_run(run_dir, flags):
        size = flags[flags.index("--img-size") + 1]
        assert flags[-2:] == ["--accelerator", "gpu"]  # the study's --accelerator reaches every fine-tuning run
        trained.append((run_dir.name, size))
        hardware = "1 x GPU" if size == "64" else "1 x CPU"
        return {"test_top1": {"32": 0.99, "48": 0.9, "64": 0.8}[size], "hardware": hardware}

    def transfer_study(runs, resolutions, limit, sweep_dir, temperature_grids, earlier):
        assert resolutions == ["48", "64"] and limit == 0 and not temperature_grids  # the whole split, no YaRN study
        ckpt = {r["seed"]: str(tmp_path / r["run"] / "checkpoints" / "last.ckpt") for r in runs}
        recs = [transfer_record("rope2d", 48, 0.5 + k / 100, k, ckpt[k]) for k in ckpt]
        return {
            "records": recs + [transfer_record("rope2d", 64, 0.3, k, ckpt[k]) for k in ckpt],
            "yarn_temperature": [],
        }

    monkeypatch.setattr(finetune, "train_run", train_run)
    monkeypatch.setattr(finetune, "transfer_study", transfer_study)
    argv = ["--results", str(tmp_path / "results.json"), "--json", str(tmp_path / "finetune.json")]
    assert finetune.main([*argv, "--accelerator", "gpu"]) == 0
    assert trained == [(f"rope2d-patch-seed{k}-ft{s}", s) for k in (0, 1) for s in ("32", "48", "64")]
    text = resolution.finetune_section(json.loads((tmp_path / "finetune.json").read_text()), read_json(tmp_path))
    (table,) = tables(text)
    assert table[1][:5] == ["`rope2d`", "99.0 [99.0, 99.0] (2)", "99.0 [99.0, 99.0] (2)", "50.5 [44.1, 56.9] (2)",
                            "90.0 [90.0, 90.0] (2)"]  # fmt: skip
    assert verdicts(text) == {"`rope2d`": ("above", ["48", "64"])}
    assert re.findall(r"(1 x [GC]PU) \((\d) runs?\)", text) == [("1 x CPU", "4"), ("1 x GPU", "2")]  # results.json's


def test_finetune_study_with_runs_keeps_the_records_of_the_schemes_it_leaves_out(bench, tmp_path, monkeypatch):
    runs = [{"run": f"runs/{pos}-patch{lr}-seed0", "pos": pos, "stem": "patch", "seed": 0, "pos_lr_scale": 30.0,
             "pos_weight_decay": 0.0, "test_top1": 0.9}
            for pos, lr in (("rope2d", ""), ("learned", "-lr30"))]  # fmt: skip
    finetune = finetune_here(bench, tmp_path, monkeypatch, runs)
    learned_ckpt = str(tmp_path / "runs/learned-patch-lr30-seed0/checkpoints/last.ckpt")
    kept = {"run": "runs/learned-patch-lr30-seed0", "pos": "learned", "stem": "patch", "seed": 0, "img_size": 64,
            "test_top1": 0.7}  # fmt: skip
    stale = kept | {"run": "runs/rope2d-patch-lr1-seed0"}  # a run that is not at the default rule (any more)
    earlier = {"records": [transfer_record("learned", 64, 0.3, 0, learned_ckpt)], "finetuned": [kept, stale]}
    (tmp_path / "finetune.json").write_text(json.dumps(earlier))
    trained, swept = [], []
    monkeypatch.setattr(finetune, "train_run", lambda run_dir, flags: trained.append(run_dir.name) or {"test_top1": 1})

    def transfer_study(runs, resolutions, limit, sweep_dir, temperature_grids, earlier):
        swept.extend(r["pos"] for r in runs)
        return {"records": [transfer_record("rope2d", 64, 0.4, 0, str(finetune.last_ckpt(runs[0])))],
                "yarn_temperature": []}  # fmt: skip

    monkeypatch.setattr(finetune, "transfer_study", transfer_study)
    argv = ["--results", str(tmp_path / "results.json"), "--json", str(tmp_path / "finetune.json")]
    assert finetune.main([*argv, "--runs", "rope2d:patch"]) == 0
    assert swept == ["rope2d"] and trained == [f"rope2d-patch-seed0-ft{s}" for s in (32, 48, 64)]
    d = json.loads((tmp_path / "finetune.json").read_text())
    assert sorted(r["scheme"] for r in d["records"]) == ["learned", "rope2d"]  # the left-out run's sweep is kept
    assert kept in d["finetuned"] and stale not in d["finetuned"] and len(d["finetuned"]) == 4
    said = verdicts(resolution.finetune_section(d, read_json(tmp_path)))
    assert said["`learned`"] == ("one seed", ["64"])  # and nothing said of 48 px, where it has none
    with pytest.raises(SystemExit):
        finetune.main([*argv, "--runs", "rope9:patch"])


def test_finetune_study_keeps_an_earlier_defaults_runs_apart_until_the_schemes_current_runs_are_fine_tuned(
    bench, tmp_path, monkeypatch
):
    """A scheme whose runs at the default rule have no fine-tuning yet keeps the records of its runs at an earlier
    default, which the page shows in a table of their own; once its current runs are fine-tuned, they go."""
    rope = {"run": "runs/rope2d-patch-seed0", "pos": "rope2d", "stem": "patch", "seed": 0, "pos_lr_scale": 30.0,
            "pos_weight_decay": 0.0, "test_top1": 0.99, "pos_params": False}  # fmt: skip
    learned = rope | {"run": "runs/learned-patch-lr30-seed0", "pos": "learned", "pos_params": True, "test_top1": 0.9}
    finetune = finetune_here(bench, tmp_path, monkeypatch, [rope])  # `learned`'s checkpoint: not here yet
    old = learned | {"run": "runs/learned-patch-lr1-seed0", "pos_lr_scale": 1.0, "test_top1": 0.5}
    d = read_json(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps(d | {"runs": [*d["runs"], learned, old]}))
    old_ckpt = str(tmp_path / old["run"] / "checkpoints" / "last.ckpt")
    earlier = {"finetune": ["--epochs", "1", "--lr", "0.00025", "--warmup-epochs", "0.1"],
               "records": [transfer_record("learned", s, 0.2, 0, old_ckpt) for s in (48, 64)],
               "finetuned": [{"run": old["run"], "pos": "learned", "stem": "patch", "seed": 0, "img_size": s,
                              "test_top1": t} for s, t in ((32, 0.6), (48, 0.4), (64, 0.3))]}  # fmt: skip
    (tmp_path / "finetune.json").write_text(json.dumps(earlier))
    monkeypatch.setattr(finetune, "train_run", lambda run_dir, flags: {"test_top1": 0.95})

    def transfer_study(runs, resolutions, limit, sweep_dir, temperature_grids, earlier):
        return {"records": [transfer_record(r["pos"], s, 0.7, 0, str(finetune.last_ckpt(r))) for r in runs
                            for s in (48, 64)], "yarn_temperature": []}  # fmt: skip

    monkeypatch.setattr(finetune, "transfer_study", transfer_study)
    argv = ["--results", str(tmp_path / "results.json"), "--json", str(tmp_path / "finetune.json")]
    assert finetune.main(argv) == 0
    d = json.loads((tmp_path / "finetune.json").read_text())
    assert {f["run"] for f in d["finetuned"]} == {rope["run"], old["run"]}
    assert sorted(r["scheme"] for r in d["records"]) == ["learned", "learned", "rope2d", "rope2d"]
    text = resolution.finetune_section(d, read_json(tmp_path))
    (table,) = tables(text)
    assert [r[0] for r in table[1:]] == ["`rope2d`"] and "`learned`" not in text  # the current default's only
    assert re.search(r"^3 .*earlier default", text, re.M)  # the earlier default's runs, counted

    (tmp_path / learned["run"] / "checkpoints").mkdir(parents=True)  # its current run, here now
    (tmp_path / learned["run"] / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    assert finetune.main(argv) == 0
    d = json.loads((tmp_path / "finetune.json").read_text())
    assert {f["run"] for f in d["finetuned"]} == {rope["run"], learned["run"]}
    assert old_ckpt not in {r["checkpoint"] for r in d["records"]}
    text = resolution.finetune_section(d, read_json(tmp_path))
    assert "earlier default" not in text and [r[0] for r in tables(text)[0][1:]] == ["`rope2d`", "`learned`"]


def test_finetune_study_with_train_missing_trains_the_runs_whose_checkpoints_are_gone_as_results_py_did(
    bench, tmp_path, monkeypatch
):
    """--train-missing trains a run whose checkpoint is gone and that has no fine-tuning record again, with its
    record's scheme, seed, rule and scheme options, into its own folder, before fine-tuning it; without the flag that
    run is left alone, and a run whose fine-tuning is recorded is not trained again."""
    rope = {"run": "runs/rope2d-patch-seed0", "pos": "rope2d", "stem": "patch", "seed": 0, "pos_lr_scale": 30.0,
            "pos_weight_decay": 0.0, "test_top1": 0.99}  # fmt: skip
    finetune = finetune_here(bench, tmp_path, monkeypatch, [rope])
    learned = rope | {"run": "runs/learned-patch-lr30-seed2", "pos": "learned", "seed": 2, "pos_kwargs": {}}
    d = read_json(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps(d | {"runs": [*d["runs"], learned]}))
    trained = []

    def train_run(run_dir, flags, retrain=False):
        trained.append((run_dir.relative_to(tmp_path).as_posix(), flags, retrain))
        if "--init-from" not in flags:
            (run_dir / "checkpoints").mkdir(parents=True)
            (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
        return {"test_top1": 0.9}

    monkeypatch.setattr(finetune, "train_run", train_run)
    monkeypatch.setattr(finetune, "transfer_study", lambda *a, **k: {"records": [], "yarn_temperature": []})
    argv = ["--results", str(tmp_path / "results.json"), "--json", str(tmp_path / "finetune.json")]
    assert finetune.main(argv) == 0
    ft = "runs/bench-shapes/finetune"
    assert {run for run, *_ in trained} == {f"{ft}/rope2d-patch-seed0-ft{s}" for s in (32, 48, 64)}
    trained.clear()
    assert finetune.main([*argv, "--train-missing"]) == 0
    run, flags, retrain = trained[0]  # first the 32 px run, then its fine-tuning
    assert run == learned["run"] and retrain and flags == ["--pos", "learned", "--stem", "patch", "--seed", "2",
                                                           "--pos-lr-scale", "30", "--pos-weight-decay", "0",
                                                           "--pos-lr-warmup-epochs", "0"]  # fmt: skip
    assert [r for r, *_ in trained[-3:]] == [f"{ft}/learned-patch-lr30-seed2-ft{s}" for s in (32, 48, 64)]
    (tmp_path / learned["run"] / "checkpoints" / "last.ckpt").unlink()  # gone again, its fine-tuning recorded now
    trained.clear()
    assert finetune.main([*argv, "--train-missing"]) == 0
    assert learned["run"] not in [run for run, *_ in trained]


def test_finetune_study_keeps_one_protocol_per_folder_and_no_record_of_another(bench, tmp_path, monkeypatch, capsys):
    runs = [{"run": f"runs/rope2d-patch-seed{k}", "pos": "rope2d", "stem": "patch", "seed": k, "pos_lr_scale": 30.0,
             "pos_weight_decay": 0.0, "test_top1": 0.9} for k in (0, 1)]  # fmt: skip
    finetune = finetune_here(bench, tmp_path, monkeypatch, runs)
    flags_seen = []

    def train_run(run_dir, flags):
        flags_seen.append(flags)
        (run_dir / "results.json").parent.mkdir(parents=True, exist_ok=True)
        (run_dir / "results.json").write_text("{}")
        return {"test_top1": 0.5}

    monkeypatch.setattr(finetune, "train_run", train_run)
    monkeypatch.setattr(finetune, "transfer_study", lambda *a, **k: {"records": [], "yarn_temperature": []})
    argv = ["--results", str(tmp_path / "results.json"), "--json", str(tmp_path / "finetune.json")]
    assert finetune.main(argv) == 0
    assert flags_seen[0][-6:] == ["--epochs", "1", "--lr", "0.00025", "--warmup-epochs", "0.1"]
    first = json.loads((tmp_path / "finetune.json").read_text())
    assert first["finetune"] == flags_seen[0][-6:] and len(first["finetuned"]) == 6
    (tmp_path / runs[1]["run"] / "checkpoints" / "last.ckpt").unlink()  # its records would stay under this protocol

    with pytest.raises(SystemExit):  # the default folder holds the runs of the first protocol
        finetune.main([*argv, "--ft-lr", "0.001"])
    assert "pass another --out" in capsys.readouterr().err
    flags_seen.clear()
    assert finetune.main([*argv, "--ft-lr", "0.001", "--ft-epochs", "2", "--out", "runs/ft-lr1e-3"]) == 0
    assert all(f[-6:] == ["--epochs", "2", "--lr", "0.001", "--warmup-epochs", "0.1"] for f in flags_seen)
    assert len(flags_seen) == 3  # seed 0 again, nothing reused from the first folder
    second = json.loads((tmp_path / "finetune.json").read_text())
    assert second["finetune"][:4] == ["--epochs", "2", "--lr", "0.001"]
    assert {f["run"] for f in second["finetuned"]} == {runs[0]["run"]}  # seed 1's records were of the first protocol
    text = resolution.finetune_section(second, None)
    assert tables(text)[0][0][2] == "32 px +2 epochs" and "--epochs 2 --lr 0.001" in text  # the protocol it states


def verdicts(text: str) -> dict[str, tuple[str, list[str]]]:
    """The fine-tuning section's verdict per scheme: above / below / not separated / one seed, and at which sizes."""
    out = {}
    for item in (line[2:] for line in text.splitlines() if line.startswith("- ")):
        who, said = item.split(": ", 1)
        kind = next(k for k in ("above", "below", "not separated", "one seed") if k in said)
        out[who] = (kind, re.findall(r"\d+", said))
    return out


def read_json(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_results_study_trains_main_top_and_more_seeds_schemes_with_every_seed(bench, tmp_path, monkeypatch):
    from benchmarks import results

    monkeypatch.setattr(results, "ROOT", tmp_path)
    val = {"rope2d-mixed": 0.99, "liere": 0.98, "cpb": 0.5, "lookhere": 0.4}  # seed-0 validation top-1
    trained = []

    def train_run(run_dir, flags, retrain=False):
        pos, seed = flags[flags.index("--pos") + 1], int(flags[flags.index("--seed") + 1])
        trained.append((pos, seed, "--pos-lr-scale" in flags))
        return {"run": run_dir.name, "best_val_top1": val.get(pos, 0.9), "test_top1": 0.9}

    monkeypatch.setattr(results, "train_run", train_run)
    others = ["rope2d-mixed:patch", "liere:patch", "cpb:patch", "lookhere:patch"]
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "1", "--others", *others, "--top", "1", "--more-seeds",
            "lookhere:patch", "--ablation", "--sweep", "--json", str(tmp_path / "results.json")]  # fmt: skip
    assert results.main(argv) == 0
    seeds = {pos: sorted(s for p, s, _ in trained if p == pos) for pos, _, _ in trained}
    assert seeds == {"rope2d": [0, 1], "rope2d-mixed": [0, 1], "liere": [0], "cpb": [0], "lookhere": [0, 1]}
    assert {p for p, _, scaled in trained if scaled} == {"rope2d-mixed", "liere", "cpb"}  # those with parameters
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["top_others"] == ["rope2d-mixed:patch"] and len(record["runs"]) == len(trained)
    trained.clear()  # without --more-seeds: every one of --others gets every seed
    cut = argv.index("--more-seeds")
    assert results.main([*argv[:cut], *argv[cut + 2 :], "--retrain", "--repick"]) == 0
    assert {pos: sorted(s for p, s, _ in trained if p == pos) for pos, _, _ in trained} == {
        pos: [0, 1] for pos in ("rope2d", "rope2d-mixed", "liere", "cpb", "lookhere")}  # fmt: skip


def test_results_study_with_jobs_trains_at_once_and_records_as_one_at_a_time(bench, tmp_path, monkeypatch):
    """--jobs 2: two trainings overlap, each with half the cores, and the record (runs, order, top pick) is the one a
    single job writes."""
    import threading
    import time

    from benchmarks import results

    monkeypatch.setattr(results, "ROOT", tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # restored after the test
    monkeypatch.setattr(results.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    val = {"rope2d-mixed": 0.99, "liere": 0.98}
    busy, most, threads, lock = [0], [0], set(), threading.Lock()

    def train_run(run_dir, flags, retrain=False):
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
            threads.add(results.os.environ["OMP_NUM_THREADS"])
        time.sleep(0.05)
        with lock:
            busy[0] -= 1
        pos = flags[flags.index("--pos") + 1]
        return {"run": run_dir.name, "best_val_top1": val.get(pos, 0.5), "test_top1": 0.9}

    monkeypatch.setattr(results, "train_run", train_run)
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "1", "--others", "liere:patch", "rope2d-mixed:patch", "--top",
            "1", "--more-seeds", "--ablation", "liere:patch", "--sweep", "learned:patch:10:0", "--retrain"]  # fmt: skip
    records = []
    for jobs in ("1", "2"):
        most[0] = 0
        out = tmp_path / f"jobs{jobs}.json"
        assert results.main([*argv, "--json", str(out), "--jobs", jobs]) == 0
        records.append(json.loads(out.read_text()))
        assert most[0] == int(jobs)
    assert threads == {"7", "2"}  # one job: the environment as it was; two: 4 cores / 2 each
    assert records[0]["runs"] == records[1]["runs"] and records[0]["top_others"] == records[1]["top_others"]
    assert [r["run"] for r in records[1]["runs"]][:5] == [
        "rope2d-patch-seed0", "rope2d-patch-seed1", "liere-patch-lr30-wd0.3-start-ramp5-seed0",
        "rope2d-mixed-patch-lr30-wd0.3-start-ramp5-seed0",
        "rope2d-mixed-patch-lr30-wd0.3-start-ramp5-seed1"]  # fmt: skip


def test_results_study_trains_scheme_options_apart_and_its_page_keeps_them_apart(bench, tmp_path, monkeypatch):
    """A sweep item's KEY=VALUE (PART.KEY=VALUE in a composition) reaches train.py as --pos-kwarg, names the run
    folder and the record, and the page shows those runs in their own row, never pooled with the scheme's defaults."""
    from benchmarks import results

    monkeypatch.setattr(results, "ROOT", tmp_path)
    flags_of = {}

    def train_run(run_dir, flags, retrain=False):
        flags_of[run_dir.name] = flags
        top1 = 0.3 if "--pos-kwarg" in flags else 0.99
        return {"run": run_dir.name, "best_val_top1": top1, "test_top1": top1, "train_top1": 1.0,
                "train_seconds": 1.0}  # fmt: skip

    monkeypatch.setattr(results, "train_run", train_run)
    sweep = ["relbias:patch:30:1:locality=0", "relbias+peg:patch:30:0:relbias.locality=0"]
    argv = ["--runs", "relbias:patch", "--seeds", "0", "1", "--others", "--ablation", "--sweep", *sweep,
            "--json", str(tmp_path / "results.json")]  # fmt: skip
    assert results.main(argv) == 0
    assert flags_of["relbias-patch-lr30-wd0.3-start-ramp5-locality0-seed1"][-2:] == ["--pos-kwarg", "locality=0"]
    assert flags_of["relbias+peg-patch-lr30-wd0.3-start-ramp5-locality0-seed0"][-2:] == [
        "--pos-kwarg", 'relbias={"locality": 0}']  # fmt: skip
    assert "--pos-kwarg" not in flags_of["relbias-patch-lr30-wd0.3-start-ramp5-seed1"]  # the default's own run
    record = json.loads((tmp_path / "results.json").read_text())
    assert [r.get("pos_kwargs") for r in record["runs"]] == [None, None, {"locality": 0}, {"relbias": {"locality": 0}}]
    headline, _, _, short = tables(pages.PAGES["results"](record, ROOT / "docs"))
    assert headline[1:] == [["`relbias`", "99.0 [99.0, 99.0] (2)", "99.0 [99.0, 99.0] (2)", "100.0 [100.0, 100.0] (2)",
                             "1 s"]]  # not the runs with options  # fmt: skip
    rules = next(r[1] for r in short if r[0] == "x 30, ramped over 5 epochs, 0.3 to start (default)")
    assert "`relbias` (locality=0) seed 1 (30.0)" in rules and "`relbias` seed" not in rules


@pytest.mark.parametrize("study", ["results", "fashion_mnist"])
def test_studies_refuse_fewer_than_one_job_in_one_line(bench, study, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(f"benchmarks.{study}").main(["--jobs", "0"])
    assert exit_.value.code == 2 and "--jobs must be at least 1, got 0" in capsys.readouterr().err


def test_results_study_keeps_its_recorded_top_others_unless_told_to_repick(bench, tmp_path, monkeypatch):
    from benchmarks import results

    monkeypatch.setattr(results, "ROOT", tmp_path)
    val = {"rope2d-mixed": 0.99, "liere": 0.98, "none": 0.25}  # seed-0 validation top-1: rope2d-mixed leads now
    trained = []

    def train_run(run_dir, flags, retrain=False):
        pos, seed = flags[flags.index("--pos") + 1], int(flags[flags.index("--seed") + 1])
        trained.append((pos, seed))
        return {"run": run_dir.name, "best_val_top1": val[pos], "test_top1": 0.9}

    monkeypatch.setattr(results, "train_run", train_run)
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"top_others": ["liere:patch"], "runs": []}))  # an earlier choice
    argv = ["--runs", "none:patch", "--seeds", "0", "1", "--others", "rope2d-mixed:patch", "liere:patch", "--top", "1",
            "--more-seeds", "--ablation", "--sweep", "--retrain", "--json", str(out)]  # fmt: skip
    assert results.main(argv) == 0
    assert json.loads(out.read_text())["top_others"] == ["liere:patch"] and ("liere", 1) in trained
    assert ("rope2d-mixed", 1) not in trained
    trained.clear()
    assert results.main([*argv, "--repick"]) == 0
    assert json.loads(out.read_text())["top_others"] == ["rope2d-mixed:patch"] and ("rope2d-mixed", 1) in trained


@pytest.mark.parametrize("change", [{}, {"default_pos_lr_scale": 10.0}, {"epochs": 5}])
def test_results_study_reuses_recorded_runs_only_at_the_same_training_budget(bench, tmp_path, monkeypatch, change):
    from benchmarks import results

    monkeypatch.setattr(results, "ROOT", tmp_path)
    trained = []

    def train_run(run_dir, flags, retrain=False):
        trained.append(run_dir.name)
        return {"run": f"runs/bench-shapes/{run_dir.name}", "best_val_top1": 0.9, "test_top1": 0.9}

    monkeypatch.setattr(results, "train_run", train_run)
    out = tmp_path / "results.json"
    argv = ["--runs", "rope2d:patch", "--seeds", "0", "--others", "--top", "0", "--more-seeds", "--ablation",
            "--sweep", "--json", str(out)]  # fmt: skip
    assert results.main(argv) == 0 and trained == ["rope2d-patch-seed0"]
    earlier = json.loads(out.read_text())
    out.write_text(json.dumps(earlier | {"budget": earlier["budget"] | change}))
    trained.clear()  # the run's folder is gone (train_run made none): only its record is left
    assert results.main(argv) == 0
    # the default rule is not part of a run's budget (each run names its own scale); the epochs are
    assert trained == (["rope2d-patch-seed0"] if "epochs" in change else [])


@pytest.mark.parametrize("ratio", [1.1, 1.5])
def test_pos_dynamics_study_keeps_each_runs_curves_and_its_page_compares_them_step_by_step(
    bench, tmp_path, monkeypatch, ratio
):
    """Each scheme under the default rule and the rule off; the page gives, per rule, the ratio of its curves to
    `learned`'s at every step both logged, and says they move alike only where every ratio is within the bar."""
    from benchmarks import pos_dynamics as pd

    monkeypatch.setattr(pd, "ROOT", tmp_path)
    flags_of = {}

    def train_run(run_dir, flags):
        flags_of[run_dir.name] = flags
        pos, off = flags[flags.index("--pos") + 1], "--pos-lr-scale" in flags
        k = ratio if pos == "rope2d+learned" else 1.0
        rows_ = [f"{s},{0.02 * (1 + (1 if off else 10) * s / 600) * k},{1e-4 * k}" for s in range(0, 600, 10)]
        (run_dir / "logs").mkdir(parents=True)
        # the last row is a validation row: no pos/rms
        (run_dir / "logs" / "metrics.csv").write_text("step,pos/rms,pos/grad_rms\n" + "\n".join(rows_) + "\n62,,\n")
        return {"test_top1": 0.9 if pos == "learned" else 0.95, "train_top1": 0.97, "run": run_dir.name}

    monkeypatch.setattr(pd, "train_run", train_run)
    assert pd.main(["--json", str(tmp_path / "pos_dynamics.json")]) == 0
    default = bench.run_name("learned", "patch", 0, pd.pos_rule(30.0, 0.3, "start", 5.0))  # named by the rule's values
    assert default == "learned-patch-lr30-wd0.3-start-ramp5-seed0"
    assert set(flags_of) == {f"{p}-patch-{r}-seed0" for p in ("learned", "rope2d+learned")
                             for r in ("lr30-wd0.3-start-ramp5", "lr1")}  # fmt: skip
    rule_flags = {name: [f for f in flags if f.startswith("--pos-")] for name, flags in flags_of.items()}
    assert rule_flags["learned-patch-lr1-seed0"] == ["--pos-lr-scale", "--pos-weight-decay"]
    assert rule_flags[default] == []  # nothing but the defaults
    d = json.loads((tmp_path / "pos_dynamics.json").read_text())
    by = {(r["pos"], r["rule"]): r for r in d["runs"]}
    assert by["learned", "off"]["pos_lr_scale"] == 1.0 < by["learned", "default"]["pos_lr_scale"]
    assert by["learned", "off"]["step"] == list(range(0, 600, 10))  # the validation row left out
    page = pages.PAGES["pos_dynamics"](d, tmp_path)
    compared = [r for r in rows(page) if r[0] == "`rope2d+learned` / `learned`"]
    same = f"{ratio:.2f} ({ratio:.2f} to {ratio:.2f})"  # median (lowest to highest) over the steps
    assert [r[2:] for r in compared] == [[same, same, "95.0 / 90.0"]] * 2
    assert ("`rope2d+learned` under the default rule" in page) == (ratio < pos_dynamics.ALIKE)
    assert (tmp_path / "pos_dynamics.png").is_file()


def test_a_record_interrupted_while_written_leaves_the_last_one_whole(tmp_path, monkeypatch):
    from benchmarks import common as bench_common

    out = tmp_path / "study.json"
    bench_common.write_record(out, "study.py", [], records=[1])

    def torn(self, text, *a, **k):  # a write stopped half-way, as a signal would stop it
        Path.write_bytes(self, text[: len(text) // 2].encode())
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", torn)
    with pytest.raises(KeyboardInterrupt):
        bench_common.write_record(out, "study.py", [], records=[1, 2])
    monkeypatch.undo()
    assert json.loads(out.read_text())["records"] == [1]


def test_records_name_the_code_the_process_imported_not_a_commit_made_while_it_runs(monkeypatch):
    from benchmarks import common as bench_common

    monkeypatch.setattr(bench_common, "code_version", lambda: "a-later-commit")  # HEAD moved during a long study
    assert bench_common.provenance()["commit"] == bench_common.LOADED_VERSION != "a-later-commit"
