"""The benchmarks' plumbing, and the pages docs/render.py makes from their JSON (with its statistics)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import ROOT  # noqa: E402


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs"))  # render.py, beside the pages it writes
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


def test_mean_ci_is_the_t_interval_and_separation_needs_disjoint_intervals(bench):
    import render

    mean, lo, hi = render.mean_ci([0.90, 0.92, 0.94])
    assert mean == pytest.approx(0.92) and hi - mean == pytest.approx(4.303 * 0.02 / 3**0.5, rel=1e-4)
    assert lo == pytest.approx(2 * mean - hi)
    assert all(v != v for v in render.mean_ci([0.5])[1:])  # one seed: no interval
    assert render.separated([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert not render.separated([0.90, 0.91, 0.92], [0.88, 0.90, 0.95])  # overlapping intervals
    assert not render.separated([0.99], [0.10, 0.11])  # one seed: never "beats"
    assert render.interval([0.5]) == "50.0 (1)" and render.interval([]) == "–"  # a cell with no runs


@pytest.mark.parametrize("page", ["results", "resolution", "fashion_mnist", "performance", "export", "data",
                                  "pos_dynamics"])  # fmt: skip
def test_docs_pages_are_rendered_from_their_json(bench, tmp_path, page):
    import render

    for src in (ROOT / "docs").glob("*.json"):  # a page may read another page's record (plots go to tmp_path)
        shutil.copy(src, tmp_path)
    made = render.PAGES[page](json.loads((tmp_path / f"{page}.json").read_text()), tmp_path)
    assert made == (ROOT / "docs" / f"{page}.md").read_text()  # the page says what its data says


def test_data_page_derives_workers_from_the_published_throughput(bench):
    import render

    per_core = json.loads((ROOT / "docs" / "data.json").read_text())["measured"]["shards"]["img_per_cpu_s"]
    need = render.GPUS_PER_NODE * render.anchors()["vit_s16_train_throughput"]["train_img_per_s"]
    workers = render.workers_needed(per_core, need / render.GPUS_PER_NODE)
    assert (workers - 1) * per_core < need <= workers * per_core  # the fewest one-core workers that keep up


def test_comparisons_say_beats_only_where_intervals_separate(bench):
    import render

    lines = render.comparisons({
        ("a", "patch"): [0.90, 0.91, 0.92],
        ("b", "patch"): [0.80, 0.81, 0.82],
        ("c", "patch"): [0.70, 0.85, 0.95],
        ("d", "patch"): [0.99],  # one seed: never compared
    })  # fmt: skip
    assert lines[0] == "- `a` beats `b`; not separated from `c`."
    assert "`d`" not in "".join(lines) and not any(line.startswith("- `b` beats") for line in lines)


def record(**data) -> dict:
    """A benchmark's JSON record as common.write_record writes it, around ``data``."""
    machine = {"date": "2026-01-02", "cpu": "a test CPU", "cores": 2, "torch": "2.0"}
    return {"command": "python benchmarks/x.py --flag", "machine": machine, "load_average": [0.5, 0.4, 0.3], **data}


def rows(page: str) -> list[list[str]]:
    """The body rows of every markdown table on ``page``, as cells."""
    lines = [ln for ln in page.splitlines() if ln.startswith("|") and not ln.startswith("| ---")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


DIAGNOSTICS = record(num_images=64, runs=[
    {"run": "rope2d-patch-lr30-seed0", "patch_shuffle": {"top1": 0.996, "top1_shuffled": 0.219, "drop": 0.777},
     "pictures": ["rope_kernel.png", "attention_distance.png"], "attention_distance": [3.981, 4.1, 4.276]},
    {"run": "none-patch-seed0", "patch_shuffle": {"top1": 0.336, "top1_shuffled": 0.336, "drop": 0.0},
     "pictures": ["attention_distance.png"], "attention_distance": [4.114, 4.151]},
])  # fmt: skip
COMPILE = record(model="tiny", dims={"embed_dim": 192, "depth": 6, "num_heads": 3}, patch_size=4, dtype="fp32",
                 gpu=None, threads=2, warmup=2, repeats=3, steps=3, rows=[
    {"scheme": "rope2d", "mode": "train", "grid": 8, "first_call_s": 17.62,
     "eager_img_s": [100.0, 110.0, 90.0], "compiled_img_s": [120.0, 121.0, 99.0]},
    {"scheme": "rope2d", "mode": "eval", "grid": 12, "first_call_s": 8.8,
     "eager_img_s": [200.0, 210.0, 190.0], "compiled_img_s": [250.0, 210.0, 209.0]},
])  # fmt: skip


def test_diagnostics_page_shows_each_runs_numbers_and_links_its_pictures(bench, tmp_path):
    import render

    page = render.PAGES["diagnostics"](DIAGNOSTICS, tmp_path)
    assert rows(page)[1:] == [
        ["`rope2d-patch-lr30-seed0`", "99.6 %", "21.9 %", "+77.7 pts", "3.98 / 4.28",
         "[rope_kernel](diagnostics/rope2d-patch-lr30-seed0/rope_kernel.png) "
         "[attention_distance](diagnostics/rope2d-patch-lr30-seed0/attention_distance.png)"],
        ["`none-patch-seed0`", "33.6 %", "33.6 %", "+0.0 pts", "4.11 / 4.15",
         "[attention_distance](diagnostics/none-patch-seed0/attention_distance.png)"],
    ]  # fmt: skip
    assert "`python benchmarks/x.py --flag`" in page  # the command that measured


def test_compile_page_gives_the_medians_and_per_round_speed_ups(bench, tmp_path):
    import render

    page = render.PAGES["performance_compile"](COMPILE, tmp_path)
    # speed-ups per round: 1.2, 1.1, 1.1 (train) and 1.25, 1.0, 1.1 (eval): the median, (lowest to highest)
    assert rows(page)[1:] == [
        ["`rope2d`", "train", "8x8", "17.6", "100.0", "120.0", "1.10 (1.10 to 1.20)"],
        ["`rope2d`", "eval", "12x12", "8.8", "200.0", "210.0", "1.10 (1.00 to 1.25)"],
    ]
    assert "`python benchmarks/x.py --flag`" in page


def test_render_writes_the_pages_whose_json_is_there_and_no_other(bench, tmp_path):
    import render

    for name, data in (("diagnostics", DIAGNOSTICS), ("performance_compile", COMPILE)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    assert render.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "diagnostics.json", "diagnostics.md", "performance_compile.json", "performance_compile.md"]  # fmt: skip
    assert (tmp_path / "diagnostics.md").read_text() == render.PAGES["diagnostics"](DIAGNOSTICS, tmp_path)


def test_hardware_line_counts_each_machine_and_the_runs_that_name_none(bench):
    import render

    runs = [{"hardware": "1 x GPU"}] * 3 + [{"hardware": "1 x CPU"}] + [{}] * 2
    line = render.hardware_line(runs, "the runs")
    assert line == " Where the runs trained: 1 x GPU (3 runs), 1 x CPU (1 run); not recorded for 2 older ones."
    assert render.hardware_line([{}, {}]) == ""  # nothing to say where no run names its machine


def test_diagnostics_takes_each_schemes_seed_0_run_at_the_default_rule(bench, tmp_path, monkeypatch):
    import render

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
    page = render.PAGES["diagnostics"](json.loads((tmp_path / "diagnostics.json").read_text()), tmp_path)
    assert [row[:5] for row in rows(page)[1:]] == [
        ["`rope2d-patch-seed0`", "50.0 %", "25.0 %", "+25.0 pts", "3.00 / 4.00"],
        ["`learned-patch-lr30-seed0`", "50.0 %", "25.0 %", "+25.0 pts", "3.00 / 4.00"],
        ["`relbias-patch-lr30-seed0`", "90.0 %", "10.0 %", "+80.0 pts", "2.00 / 2.00"],
    ]
    assert "The runs trained their position parameters at lr x 30 (`--pos-lr-scale`) without decay." in page
    assert "The default rule differs" not in page  # these runs are the default's
    # a gone checkpoint with no earlier record: a one-line error, not a page without it
    (tmp_path / "diagnostics.json").write_text(json.dumps(record(num_images=8, runs=[])))
    with pytest.raises(SystemExit):
        diagnostics.main(argv)


def test_pages_of_runs_at_another_rule_say_so_and_how_to_take_the_default(bench, tmp_path):
    import render

    default = {"default_pos_lr_scale": 30.0, "default_pos_weight_decay": 0.3, "default_pos_decay_to": "start"}
    results = {"budget": default,
               "runs": [{"run": "runs/x/rope2d-patch-lr30-seed0", "pos_lr_scale": 30.0, "pos_params": True},
                        {"run": "runs/x/none-patch-seed0", "pos_lr_scale": 30.0, "pos_weight_decay": 0.3,
                         "pos_decay_to": "start", "pos_params": False}]}  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps(results))
    page = render.PAGES["diagnostics"](DIAGNOSTICS, tmp_path)
    assert ("The runs trained their position parameters at lr x 30 (`--pos-lr-scale`) without decay. The default "
            "rule differs (position parameters at lr x 30 (`--pos-lr-scale`) with a decay of 0.3 towards their start "
            "(`--pos-weight-decay`, `--pos-decay-to`)). `python benchmarks/x.py --flag` again takes the runs at the "
            "defaults.") in page  # fmt: skip
    results["budget"] |= {"default_pos_weight_decay": 0.0}
    (tmp_path / "results.json").write_text(json.dumps(results))
    page = render.PAGES["diagnostics"](DIAGNOSTICS, tmp_path)
    assert "The default rule differs" not in page and "again takes" not in page
    results["runs"][0] |= {"pos": "rope2d", "pos_kwargs": {"theta": 10}}  # the rule's default, not the scheme's
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert ("without decay. Runs with scheme options, not the scheme's defaults: `rope2d` (theta=10). "
            "`python benchmarks/x.py --flag` again takes the runs at the defaults.") in render.PAGES["diagnostics"](
        DIAGNOSTICS, tmp_path)  # fmt: skip


def test_results_page_holds_every_rule_against_the_default(bench):
    """The headline holds the default rule's runs only; every rule measured gets a column, and the default is held
    against the rule off and against its scale alone, by intervals where both have seeds."""
    import render

    def run(pos: str, seed: int, top1: float, scale: float = 30.0, **rule) -> dict:
        return {"spec": f"{pos}:patch", "pos": pos, "stem": "patch", "seed": seed, "pos_lr_scale": scale,
                "pos_params": True, "best_val_top1": top1, "test_top1": top1, "train_top1": 1.0,
                "train_seconds": 1.0, **rule}  # fmt: skip

    default = {"pos_weight_decay": 0.3, "pos_decay_to": "start"}
    record = json.loads((ROOT / "docs" / "results.json").read_text())
    record["budget"] |= {f"default_{k}": v for k, v in (default | {"pos_lr_scale": 30.0}).items()}
    record["budget"]["default_pos_lr_warmup_epochs"] = 0.0  # this test's default: no ramp
    record["runs"] = [run("learned", k, 0.95 + k / 100, **default) for k in range(3)]
    record["runs"] += [run("learned", k, 0.90 + k / 100) for k in range(3)]  # older records: no decay named
    record["runs"] += [run("learned", 0, 0.30, scale=1.0)]
    record["runs"] += [run("learned", 0, 0.97, pos_weight_decay=1.0, pos_decay_to="start", pos_lr_warmup_epochs=3)]
    record["runs"] += [run("peg", 0, 0.60, **default), run("peg", 0, 0.30, pos_weight_decay=0.3)]  # to zero
    page = render.render_results(record, ROOT / "docs")
    lines = page.splitlines()
    assert "| `learned` | 96.0 [93.5, 98.5] (3) | 96.0 [93.5, 98.5] (3) | 100.0 [100.0, 100.0] (3) | 1 s |" in lines
    header = next(line for line in lines if line.startswith("| scheme | x 1 |"))
    assert header == ("| scheme | x 1 | x 30 | x 30, 0.3 to zero | x 30, 0.3 to start (default) | "
                      "x 30, ramped over 3 epochs, 1 to start |")  # fmt: skip
    assert "| `learned` | 30.0 (1) | 91.0 [88.5, 93.5] (3) | – | 96.0 [93.5, 98.5] (3) | 97.0 (1) |" in lines
    assert "| `peg` | – | – | 30.0 (1) | 60.0 (1) | – |" in lines
    assert "| `learned` | it (one seed) below the default's 95 % interval | default above |" in lines
    assert "| `peg` | – | – |" in lines  # nothing to hold it against


def test_rule_columns_have_one_order_whatever_the_hash_seed(bench):
    """Two rules that differ in one field only never tie (a tie would leave their columns in a set's hash order)."""
    import render

    base = (30.0, 0.3, "start", 0.0)
    for i, other in ((0, 10.0), (1, 1.0), (2, "zero"), (3, 1.0), (3, 3.0)):
        rule = (*base[:i], other, *base[i + 1 :])
        assert render.rule_order(rule) != render.rule_order(base)
    assert render.rule_order((30.0, 0.3, "start", 1.0)) < render.rule_order((30.0, 0.3, "start", 3.0))


def test_results_page_says_what_each_rule_leaves_short(bench):
    """Per rule: `learned`/`relbias` seeds under 90 %, and the schemes below the rule off's interval (one seed:
    below its low end; seeds on both sides: only where the intervals separate)."""
    import render

    def run(pos: str, seed: int, top1: float, scale: float = 30.0, **rule) -> dict:
        return {"spec": f"{pos}:patch", "pos": pos, "stem": "patch", "seed": seed, "pos_lr_scale": scale,
                "pos_params": True, "best_val_top1": top1, "test_top1": top1, "train_top1": 1.0,
                "train_seconds": 1.0, "pos_weight_decay": 0.3, "pos_decay_to": "start", **rule}  # fmt: skip

    ramp = {"pos_lr_warmup_epochs": 3.0}
    record = json.loads((ROOT / "docs" / "results.json").read_text())
    record["budget"] |= {"default_pos_lr_scale": 30.0, "default_pos_weight_decay": 0.3,
                         "default_pos_decay_to": "start", "default_pos_lr_warmup_epochs": 0.0}  # fmt: skip
    off = {"pos_weight_decay": 0.0, "pos_decay_to": "none"}
    record["runs"] = [run("relbias", k, 0.99) for k in range(3)] + [run("relbias", 1, 0.25, **ramp)]
    record["runs"] += [run("learned", 0, 0.95), run("learned", 0, 0.89, **ramp)]
    record["runs"] += [run("rope2d+learned", k, v) for k, v in enumerate((0.95, 0.96, 0.97))]
    record["runs"] += [run("rope2d+learned", k, v, scale=1.0, **off) for k, v in enumerate((0.990, 0.992, 0.991))]
    record["runs"] += [run("rope2d+learned", 0, 0.985, **ramp)]  # one seed under the low end: short
    record["runs"] += [run("cpb", k, v) for k, v in enumerate((0.90, 0.97, 0.99))]  # mean under, not separated
    record["runs"] += [run("cpb", k, v, scale=1.0, **off) for k, v in enumerate((0.98, 0.985, 0.99))]
    lines = render.render_results(record, ROOT / "docs").splitlines()
    assert ("| x 30, 0.3 to start (default) | none | `rope2d+learned` 96.0 [93.5, 98.5] (3) against [98.9, 99.3] | 10 |"
            in lines)  # fmt: skip
    assert (
        "| x 30, ramped over 3 epochs, 0.3 to start | `learned` seed 0 (89.0); `relbias` seed 1 (25.0) | "
        "`rope2d+learned` 98.5 (1) against [98.9, 99.3] | 3 |"
    ) in lines


def test_results_page_says_which_other_schemes_have_every_seed(bench):
    import render

    from benchmarks.rules import pos_rule_of

    record = json.loads((ROOT / "docs" / "results.json").read_text())
    default = pos_rule_of(record["budget"], "default_")  # the runs the page's headline holds

    def run(pos: str, seed: int) -> dict:
        return {"spec": f"{pos}:patch", "pos": pos, "stem": "patch", "seed": seed, **default, "pos_params": True,
                "best_val_top1": 0.9, "test_top1": 0.9, "train_seconds": 1.0}  # fmt: skip

    record |= {"main_runs": ["learned:patch"], "top_others": ["cpb:patch"]}
    record["runs"] = [run(pos, k) for pos in ("learned", "cpb", "peg") for k in range(3)]
    assert "; so is every other scheme," in render.render_results(record, ROOT / "docs")
    record["runs"] += [run("liere", 0)]  # one other with seed 0 only: the page names those with more
    page = render.render_results(record, ROOT / "docs")
    assert "; so is every other scheme," not in page and "; `peg` has further seeds" in page
    record["runs"] += [run("alibi2d", k) for k in range(3)]
    assert "; `peg`, `alibi2d` have further seeds" in render.render_results(record, ROOT / "docs")


def transfer_record(scheme: str, side: int, top1: float, seed: int = 0, ckpt: str | None = None) -> dict:
    return {"checkpoint": ckpt or f"/runs/{scheme}-seed{seed}/checkpoints/last.ckpt", "scheme": scheme,
            "stem": "patch", "method": "m", "default_method": True, "height": side, "width": side, "top1": top1,
            "seed": seed}  # fmt: skip


def test_published_claims_are_judged_by_the_intervals_here(bench):
    """A published 'A above B' is 'agrees' or 'disagrees' only where the intervals separate."""
    import render

    recs = [transfer_record("lookhere", 64, v, k) for k, v in enumerate((0.80, 0.82, 0.81))]
    recs += [transfer_record("rope2d", 64, v, k) for k, v in enumerate((0.40, 0.42, 0.41))]
    recs += [transfer_record("rope2d-norm", 64, v, k) for k, v in enumerate((0.20, 0.21, 0.22))]
    recs += [transfer_record("liere", 64, 0.5), transfer_record("learned", 64, 0.4)]  # one seed each
    recs += [transfer_record(k, 96, 0.3) for k in ("lookhere", "rope2d")]  # one seed each: never a verdict
    text = "\n".join(line for b in render.published_section(recs, 32) for line in ([b] if isinstance(b, str) else b))
    assert "- At 64 px (2x), `lookhere` above `rope2d`: agrees." in text
    assert "- At 96 px (3x), `lookhere` above `rope2d`: not separated (+0.0 points, one seed)." in text
    assert "- At 64 px (2x), `rope2d-norm` above `rope2d`: disagrees." in text
    assert "`liere` above `learned` (published at 276 px): not separated (+10.0 points, one seed)." in text
    assert "`rope2d-mixed` above `learned` (published at 276 px): not measured here." in text


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
    import render

    from benchmarks.rules import POS_RULE

    d = json.loads((ROOT / "docs" / "fashion_mnist.json").read_text())
    o = render.Config().optim
    d["budget"] |= dict(zip(POS_RULE, (o.pos_lr_scale, o.pos_weight_decay, o.pos_decay_to, o.pos_lr_warmup_epochs)))
    d["runs"] = [r | {"pos_kwargs": {}} for r in d["runs"]]
    assert "again trains" not in render.render_fashion_mnist(d, tmp_path)
    d["runs"][0]["pos_kwargs"] = {"theta": 10}
    page = render.render_fashion_mnist(d, tmp_path)
    named = render.label(render.scheme_of(d["runs"][0]), "patch")  # e.g. `rope2d` (theta=10)
    assert f"these runs set scheme options that are not the defaults: {named}" in page
    assert "The default rule now differs" not in page
    d["budget"]["pos_lr_warmup_epochs"] = o.pos_lr_warmup_epochs + 1
    assert "The default rule now differs (position parameters at lr x" in render.render_fashion_mnist(d, tmp_path)


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
    import render

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
    text = "\n".join(
        line
        for b in render.finetune_section(json.loads((tmp_path / "finetune.json").read_text()), read_json(tmp_path))
        for line in ([b] if isinstance(b, str) else b)
    )
    assert (
        "| `rope2d` | 99.0 [99.0, 99.0] (2) | 99.0 [99.0, 99.0] (2) | 50.5 [44.1, 56.9] (2) | 90.0 [90.0, 90.0] (2) |"
        in text
    )
    assert "- `rope2d`: fine-tuned above tested directly at 48 and 64 px." in text
    assert "Where the fine-tuning runs trained: 1 x CPU (4 runs), 1 x GPU (2 runs)." in text  # as results.json says


def test_finetune_study_with_runs_keeps_the_records_of_the_schemes_it_leaves_out(bench, tmp_path, monkeypatch):
    import render

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
    text = "\n".join(b if isinstance(b, str) else "\n".join(b) for b in render.finetune_section(d, read_json(tmp_path)))
    assert "- `learned`: one seed at 64 px, so not compared." in text  # and nothing said of 48 px, where it has none
    with pytest.raises(SystemExit):
        finetune.main([*argv, "--runs", "rope9:patch"])


def test_finetune_study_keeps_an_earlier_defaults_runs_apart_until_the_schemes_current_runs_are_fine_tuned(
    bench, tmp_path, monkeypatch
):
    """A scheme whose runs at the default rule have no fine-tuning yet keeps the records of its runs at an earlier
    default, which the page shows in a table of their own; once its current runs are fine-tuned, they go."""
    import render

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
    blocks = render.finetune_section(d, read_json(tmp_path))
    tables = [b for b in blocks if isinstance(b, list) and b and b[0].startswith("| scheme")]
    assert len(tables) == 1 and "`rope2d`" in tables[0][2] and len(tables[0]) == 3  # the current default's only
    said = "\n".join(b for b in blocks if isinstance(b, str))
    assert "fine-tuning runs of an earlier default are not shown" in said and "`learned`" not in said

    (tmp_path / learned["run"] / "checkpoints").mkdir(parents=True)  # its current run, here now
    (tmp_path / learned["run"] / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    assert finetune.main(argv) == 0
    d = json.loads((tmp_path / "finetune.json").read_text())
    assert {f["run"] for f in d["finetuned"]} == {rope["run"], learned["run"]}
    assert old_ckpt not in {r["checkpoint"] for r in d["records"]}
    blocks = render.finetune_section(d, read_json(tmp_path))
    assert not any("earlier default" in b for b in blocks if isinstance(b, str))


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
    import render

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
    text = "\n".join(b if isinstance(b, str) else "\n".join(b) for b in render.finetune_section(second, None))
    assert "after 2 more epochs there" in text and "| 32 px +2 epochs |" in text  # the page states the protocol


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
    import render

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
    lines = render.render_results(record, ROOT / "docs").splitlines()
    assert "| `relbias` | 99.0 [99.0, 99.0] (2) | 99.0 [99.0, 99.0] (2) | 100.0 [100.0, 100.0] (2) | 1 s |" in lines
    assert not any(line.startswith("| `relbias` (locality=0) | 30.0") for line in lines)  # not in the headline
    rules = next(line for line in lines if line.startswith("| x 30, ramped over 5 epochs, 0.3 to start (default) |"))
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
    import render

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
    page = render.PAGES["pos_dynamics"](d, tmp_path)
    compared = [r for r in rows(page) if r[0] == "`rope2d+learned` / `learned`"]
    same = f"{ratio:.2f} ({ratio:.2f} to {ratio:.2f})"  # median (lowest to highest) over the steps
    assert [r[2:] for r in compared] == [[same, same, "95.0 / 90.0"]] * 2
    assert ("move like those of `learned`" in page) == (ratio < render.ALIKE)
    assert (tmp_path / "pos_dynamics.png").is_file()
