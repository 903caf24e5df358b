"""The benchmarks' plumbing: runs and sweeps reused or made again, records kept, and what each study's page shows
of them (the pages alone: test_pages_records.py)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch
from helpers import ROOT, record, rows

from benchmarks.pages import __main__ as pages
from benchmarks.pages import common, pos_dynamics


@pytest.fixture
def bench(monkeypatch):
    from benchmarks import common

    return common


@pytest.mark.parametrize("script", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__"))
def test_every_benchmark_imports(bench, script):
    """No test runs the benchmarks themselves: importing each at least finds every name it takes from vitpos."""
    importlib.import_module(f"benchmarks.{script}")


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
    stamp = {"hardware": "1 x CPU", "device": "cpu", "commit": "abc", "torch": "2", "ckpt_sha256": "f00"}
    results["runs"][0] |= stamp
    (tmp_path / "rules.json").write_text(json.dumps(results))
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
    argv = ["--results", str(tmp_path / "rules.json"), "--docs", str(tmp_path), "--num-images", "8"]
    assert diagnostics.main(argv) == 0
    assert seen == ["rope2d-patch-seed0", "learned-patch-lr30-seed0"]
    made = json.loads((tmp_path / "diagnostics.json").read_text())["runs"]
    assert made[0].items() >= stamp.items()  # each record names the run it diagnosed: machine, code, checkpoint
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
    trained.clear()  # without --more-seeds: the top others alone get every seed
    cut = argv.index("--more-seeds")
    assert results.main([*argv[:cut], *argv[cut + 2 :], "--retrain", "--repick"]) == 0
    assert {pos: sorted(s for p, s, _ in trained if p == pos) for pos, _, _ in trained} == {
        "rope2d": [0, 1], "rope2d-mixed": [0, 1], "liere": [0], "cpb": [0], "lookhere": [0]}  # fmt: skip


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


def test_results_study_trains_scheme_options_apart(bench, tmp_path, monkeypatch):
    """A sweep item's KEY=VALUE (PART.KEY=VALUE in a composition) reaches train.py as --pos-kwarg, names the run
    folder and the record, never pooled with the scheme's defaults."""
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


@pytest.mark.parametrize("study", ["results", "study"])
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
        return {"run": f"runs/rules/{run_dir.name}", "best_val_top1": 0.9, "test_top1": 0.9}

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


def test_every_record_header_names_its_code_and_the_page_line_under_its_title_says_it(tmp_path):
    from benchmarks import common as bench_common
    from benchmarks.pages.common import measured_line

    out = tmp_path / "cost.json"
    bench_common.write_record(out, "throughput.py", ["--repeats", "1"], rows=[])
    record = json.loads(out.read_text())
    assert record["machine"]["commit"] == bench_common.LOADED_VERSION  # a speed table has no runs to name it
    assert f"commit {bench_common.LOADED_VERSION}" in measured_line(record)
    del record["machine"]["commit"]  # a record made before headers named their code: the line claims none
    assert "commit" not in measured_line(record)


def test_a_gpu_record_names_its_device_and_driver(monkeypatch):
    """On a CUDA machine the header adds the device, the driver (nvidia-smi) and torch's CUDA, and the page line says
    them; a CPU record names none."""
    import subprocess

    import torch

    from benchmarks import common as bench_common
    from benchmarks.pages.common import measured_line

    assert not {"gpu", "driver", "cuda"} & set(bench_common.machine())  # this machine: no CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    smi = subprocess.CompletedProcess([], 0, stdout="580.159.04\n", stderr="")
    monkeypatch.setattr(bench_common.subprocess, "run", lambda cmd, **kw: smi if cmd[0] == "nvidia-smi" else None)
    m = bench_common.machine()
    assert (m["gpu"], m["driver"], m["cuda"]) == ("NVIDIA H100 80GB HBM3", "580.159.04", "13.0")
    line = measured_line({"command": "c", "machine": m})
    assert "NVIDIA H100 80GB HBM3 (driver 580.159.04, CUDA 13.0)" in line


def test_records_name_the_code_the_process_imported_not_a_commit_made_while_it_runs(monkeypatch):
    from benchmarks import common as bench_common

    monkeypatch.setattr(bench_common, "code_version", lambda: "a-later-commit")  # HEAD moved during a long study
    assert bench_common.provenance()["commit"] == bench_common.LOADED_VERSION != "a-later-commit"


def test_a_trained_run_is_stamped_with_the_threads_it_trained_with_not_the_ones_of_the_study(monkeypatch, tmp_path):
    """On a CPU the thread count sets the order of floating-point sums, so a rerun can only reproduce a run at the
    same count: the stamp takes the training process's (its results.json), which a study's --jobs may set apart."""
    from benchmarks import common as bench_common

    run_dir = tmp_path / "run"

    def train(cmd):  # train.py, as its results.json and last checkpoint leave it
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
        res = {"best_val_top1": 0.5, "test": {"test/top1": 0.4}, "train_seconds": 1.0, "global_step": 2,
               "hardware": "1 x CPU", "threads": torch.get_num_threads() + 3}  # fmt: skip
        (run_dir / "results.json").write_text(json.dumps(res))

    monkeypatch.setattr(bench_common, "run", train)
    got = bench_common.train_run(run_dir, [])
    assert got["threads"] == torch.get_num_threads() + 3 != bench_common.provenance()["threads"]
    assert json.loads((run_dir / "provenance.json").read_text())["threads"] == got["threads"]  # kept for reuse
    assert bench_common.train_run(run_dir, [])["threads"] == got["threads"]


def test_a_record_is_written_one_list_entry_per_line_and_reads_back_the_same():
    from benchmarks.common import dumps

    record = {"command": "python -m benchmarks.x", "runs": [{"seed": 0, "top1": 0.5}, {"seed": 1}], "empty": [], "n": 3}
    text = dumps(record)
    assert json.loads(text) == record
    assert '\n  {"seed": 0, "top1": 0.5},\n  {"seed": 1}\n ]' in text  # each entry on its own line
    assert text.count("\n") == 9  # braces, four keys, two entries, the closing bracket
