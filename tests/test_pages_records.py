"""The pages of the benchmarks' records (results, resolution, fashion_mnist, performance, export, data, diagnostics,
pos_dynamics): table cells, row counts, the verdict each comparison gets, the links and figures written. No prose."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, items, record, rows, tables, transfer_record

from benchmarks import stats
from benchmarks.pages import __main__ as pages
from benchmarks.pages import common, data, pos_dynamics, resolution, results

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
FIGURES = {"results": [], "resolution": ["resolution.png"], "pos_dynamics": ["pos_dynamics.png"],
           "fashion_mnist": ["fashion_mnist_curves.png", "fashion_mnist_resolution.png"], "performance": [],
           "performance_compile": [], "export": [], "data": [], "diagnostics": []}  # fmt: skip


def test_separated_needs_two_runs_a_side_and_disjoint_intervals():
    assert stats.separated([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert not stats.separated([0.90, 0.91, 0.92], [0.88, 0.90, 0.95])  # overlapping intervals
    assert not stats.separated([0.99], [0.10, 0.11])  # one seed: no interval, never "beats"
    _, lo, _ = stats.mean_ci([0.90, 0.91, 0.92])
    below = [0.80, 0.81, 0.82]
    _, _, hi = stats.mean_ci(below)
    assert not stats.separated([0.90, 0.91, 0.92], [v + (lo - hi) + 1e-9 for v in below])  # the intervals touch


def test_interval_cells_give_mean_interval_and_seeds_in_percent():
    mean, lo, hi = stats.mean_ci([0.90, 0.92, 0.94])
    assert common.interval([0.90, 0.92, 0.94]) == f"92.0 [{100 * lo:.1f}, {100 * hi:.1f}] (3)"
    assert common.interval([0.5]) == "50.0 (1)" and common.interval([]) == "—"
    assert stats.mean_ci([0.98, 1.0, 1.0])[2] > 1 and common.interval([0.98, 1.0, 1.0]).endswith(", 100.0] (3)")


@pytest.mark.parametrize("page", list(pages.PAGES))
def test_every_page_renders_its_records_tables_and_figures(tmp_path, page):
    """From docs/*.json, each page has the tables (every cell) and the figures of the page committed in docs/."""
    for src in (ROOT / "docs").glob("*.json"):  # a page may read another page's record (figures go to tmp_path)
        shutil.copy(src, tmp_path)
    made = pages.PAGES[page](json.loads((tmp_path / f"{page}.json").read_text()), tmp_path)
    committed = (ROOT / "docs" / f"{page}.md").read_text()
    assert tables(made) == tables(committed) and tables(made)
    assert re.findall(r"!\[.*?\]\((.*?)\)", made) == FIGURES[page]
    assert all((tmp_path / png).stat().st_size > 0 for png in FIGURES[page])
    assert "$" not in made  # every template name was filled
    assert "`python -m benchmarks" in made or "`python benchmarks/" in made  # the command that measured


def test_data_page_derives_workers_from_the_published_throughput():
    d = json.loads((ROOT / "docs" / "data.json").read_text())
    per_core = d["measured"]["shards"]["img_per_cpu_s"]
    gpu = common.anchors()["vit_s16_train_throughput"]["train_img_per_s"]
    workers = data.workers_needed(per_core, gpu)
    need = data.GPUS_PER_NODE * gpu
    assert (workers - 1) * per_core < need <= workers * per_core  # the fewest one-core workers that keep up
    shards = next(r for r in tables(data.render(d, ROOT / "docs"))[1] if r[0] == "shards")
    assert shards[2:] == [str(data.workers_needed(per_core, gpu, 1)), str(workers)]


def verdicts(lines: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Each comparison line as scheme -> (the schemes it beats, those it is not separated from)."""
    out = {}
    for line in lines:
        line = line.removeprefix("- ")
        who = re.match(r"(`[^`]+`)", line).group(1)
        beats = re.search(r" beats (.*?)(;|\.$)", line)
        tied = re.search(r"not separated from (.*)\.$", line)
        out[who] = (re.findall(r"`[^`]+`", beats.group(1)) if beats else [],
                    re.findall(r"`[^`]+`", tied.group(1)) if tied else [])  # fmt: skip
    return out


def test_comparisons_say_beats_only_where_intervals_separate():
    said = verdicts(common.comparisons({
        ("a", "patch"): [0.90, 0.91, 0.92],
        ("b", "patch"): [0.80, 0.81, 0.82],
        ("c", "patch"): [0.70, 0.85, 0.95],
        ("d", "patch"): [0.99],  # one seed: never compared
    }))  # fmt: skip
    assert said["`a`"] == (["`b`"], ["`c`"]) and said["`c`"] == ([], ["`b`"])
    assert "`d`" not in said and "`b`" not in said  # the last has no one below it


def test_diagnostics_page_shows_each_runs_numbers_and_links_its_pictures(tmp_path):
    page = pages.PAGES["diagnostics"](DIAGNOSTICS, tmp_path)
    assert rows(page)[1:] == [
        ["`rope2d-patch-lr30-seed0`", "99.6 %", "21.9 %", "+77.7 pts", "3.98 / 4.28",
         "[rope_kernel](diagnostics/rope2d-patch-lr30-seed0/rope_kernel.png) "
         "[attention_distance](diagnostics/rope2d-patch-lr30-seed0/attention_distance.png)"],
        ["`none-patch-seed0`", "33.6 %", "33.6 %", "+0.0 pts", "4.11 / 4.15",
         "[attention_distance](diagnostics/none-patch-seed0/attention_distance.png)"],
    ]  # fmt: skip
    assert "`python benchmarks/x.py --flag`" in page  # the command that measured


def test_compile_page_gives_the_medians_and_per_round_speed_ups(tmp_path):
    page = pages.PAGES["performance_compile"](COMPILE, tmp_path)
    # speed-ups per round: 1.2, 1.1, 1.1 (train) and 1.25, 1.0, 1.1 (eval): the median, (lowest to highest)
    assert rows(page)[1:] == [
        ["`rope2d`", "train", "8x8", "17.6", "100.0", "120.0", "1.10 (1.10 to 1.20)"],
        ["`rope2d`", "eval", "12x12", "8.8", "200.0", "210.0", "1.10 (1.00 to 1.25)"],
    ]
    assert "1.10-1.10x in train, 1.10-1.10x in eval" in page  # the range of the medians per mode


def test_pages_writes_the_pages_whose_json_is_there_and_no_other(tmp_path):
    for name, d in (("diagnostics", DIAGNOSTICS), ("performance_compile", COMPILE)):
        (tmp_path / f"{name}.json").write_text(json.dumps(d))
    assert pages.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "diagnostics.json", "diagnostics.md", "performance_compile.json", "performance_compile.md"]  # fmt: skip
    assert (tmp_path / "diagnostics.md").read_text() == pages.PAGES["diagnostics"](DIAGNOSTICS, tmp_path)


def test_hardware_line_counts_each_machine_and_the_runs_that_name_none():
    runs = [{"hardware": "1 x GPU"}] * 3 + [{"hardware": "1 x CPU"}] + [{}] * 2
    line = common.hardware_line(runs, "the runs")
    assert re.findall(r"(1 x [GC]PU) \((\d) runs?\)", line) == [("1 x GPU", "3"), ("1 x CPU", "1")]
    assert re.search(r"\b2 older\b", line)
    assert common.hardware_line([{}, {}]) == ""  # nothing to say where no run names its machine


def test_rule_line_names_the_runs_rule_and_the_default_only_where_they_differ():
    default = {"default_pos_lr_scale": 30.0, "default_pos_weight_decay": 0.3, "default_pos_decay_to": "start"}
    runs = [{"run": "runs/x/rope2d-patch-lr30-seed0", "pos_lr_scale": 30.0, "pos_params": True},
            {"run": "runs/x/none-patch-seed0", "pos_lr_scale": 30.0, "pos_weight_decay": 0.3,
             "pos_decay_to": "start", "pos_params": False}]  # fmt: skip
    names = ["rope2d-patch-lr30-seed0", "none-patch-seed0"]
    ran, now = common.rule_words((30.0, 0.0, "none", 0.0)), common.rule_words((30.0, 0.3, "start", 0.0))
    line = common.rule_line(names, {"budget": default, "runs": runs}, "python x.py")
    assert ran in line and now in line and "`python x.py`" in line  # the command that takes the defaults
    same = common.rule_line(names, {"budget": default | {"default_pos_weight_decay": 0.0}, "runs": runs}, "python x.py")
    assert ran in same and now not in same and "`python x.py`" not in same
    runs[0] |= {"pos": "rope2d", "pos_kwargs": {"theta": 10}}  # the rule's default, not the scheme's
    optioned = common.rule_line(names, {"budget": default | {"default_pos_weight_decay": 0.0}, "runs": runs}, "py")
    assert "`rope2d` (theta=10)" in optioned and "`py`" in optioned
    assert common.rule_line(names[1:], {"budget": default, "runs": runs}, "py") is None  # no position parameters
    page = pages.PAGES["diagnostics"](DIAGNOSTICS, Path("/nonexistent"))  # no results.json: no rule line
    assert len([p for p in page.split("\n\n") if p.strip()]) == 4  # title, made by, how, table


def results_run(pos: str, seed: int, top1: float, scale: float = 30.0, **rule) -> dict:
    return {"spec": f"{pos}:patch", "pos": pos, "stem": "patch", "seed": seed, "pos_lr_scale": scale,
            "pos_params": True, "best_val_top1": top1, "test_top1": top1, "train_top1": 1.0,
            "train_seconds": 1.0, **rule}  # fmt: skip


def results_record(**default) -> dict:
    d = json.loads((ROOT / "docs" / "results.json").read_text())
    d["budget"] |= {f"default_{k}": v for k, v in default.items()}
    return d


def test_results_page_holds_every_rule_against_the_default():
    """The headline holds the default rule's runs only; every rule measured gets a column, and the default is held
    against the rule off and against its scale alone, by intervals where both have seeds."""
    default = {"pos_weight_decay": 0.3, "pos_decay_to": "start"}
    d = results_record(pos_lr_scale=30.0, pos_lr_warmup_epochs=0.0, **default)  # this test's default: no ramp
    d["runs"] = [results_run("learned", k, 0.95 + k / 100, **default) for k in range(3)]
    d["runs"] += [results_run("learned", k, 0.90 + k / 100) for k in range(3)]  # older records: no decay named
    d["runs"] += [results_run("learned", 0, 0.30, scale=1.0)]
    d["runs"] += [results_run("learned", 0, 0.97, pos_weight_decay=1.0, pos_decay_to="start",
                              pos_lr_warmup_epochs=3)]  # fmt: skip
    d["runs"] += [results_run("peg", 0, 0.60, **default), results_run("peg", 0, 0.30, pos_weight_decay=0.3)]
    headline, rules, against, short = tables(results.render(d, ROOT / "docs"))
    assert headline[1:] == [["`learned`", "96.0 [93.5, 98.5] (3)", "96.0 [93.5, 98.5] (3)", "100.0 [100.0, 100.0] (3)",
                             "1 s"], ["`peg`", "60.0 (1)", "60.0 (1)", "100.0 (1)", "1 s"]]  # fmt: skip
    assert rules[0] == ["scheme", "x 1", "x 30", "x 30, 0.3 to zero", "x 30, 0.3 to start (default)",
                        "x 30, ramped over 3 epochs, 1 to start"]  # fmt: skip
    assert rules[1:] == [["`learned`", "30.0 (1)", "91.0 [88.5, 93.5] (3)", "—", "96.0 [93.5, 98.5] (3)", "97.0 (1)"],
                         ["`peg`", "—", "—", "30.0 (1)", "60.0 (1)", "—"]]  # fmt: skip
    assert against[0][1:] == ["against x 1", "against x 30"]
    assert against[1:] == [["`learned`", "it (one seed) below the default's 95 % interval", "default above"],
                           ["`peg`", "—", "—"]]  # fmt: skip
    assert [r[0] for r in short[1:]] == rules[0][2:]  # every rule but the rule off


def test_results_page_verdicts_follow_the_intervals():
    assert results.against([0.80, 0.81, 0.82], [0.90, 0.91, 0.92]) == "default above"
    assert results.against([0.90, 0.91, 0.92], [0.80, 0.81, 0.82]) == "default below"
    assert results.against([0.70, 0.85, 0.95], [0.90, 0.91, 0.92]) == "not separated"
    assert results.against([0.5], [0.6]) == "+10.0 points (one seed each)"
    assert results.against([], [0.6]) == "—"
    assert "inside" in results.against([0.91], [0.90, 0.91, 0.92])
    assert results.against([0.90, 0.91, 0.92], [0.99]).startswith("the default (one seed) above")


def test_rule_columns_have_one_order_whatever_the_hash_seed():
    """Two rules that differ in one field only never tie (a tie would leave their columns in a set's hash order)."""
    base = (30.0, 0.3, "start", 0.0)
    for i, other in ((0, 10.0), (1, 1.0), (2, "zero"), (3, 1.0), (3, 3.0)):
        rule = (*base[:i], other, *base[i + 1 :])
        assert results.rule_order(rule) != results.rule_order(base)
    assert results.rule_order((30.0, 0.3, "start", 1.0)) < results.rule_order((30.0, 0.3, "start", 3.0))


def test_results_page_says_what_each_rule_leaves_short():
    """Per rule: `learned`/`relbias` seeds under 90 %, and the schemes below the rule off's interval (one seed:
    below its low end; seeds on both sides: only where the intervals separate)."""

    def run(pos: str, seed: int, top1: float, scale: float = 30.0, **rule) -> dict:
        return results_run(pos, seed, top1, scale, **({"pos_weight_decay": 0.3, "pos_decay_to": "start"} | rule))

    ramp = {"pos_lr_warmup_epochs": 3.0}
    d = results_record(pos_lr_scale=30.0, pos_weight_decay=0.3, pos_decay_to="start", pos_lr_warmup_epochs=0.0)
    off = {"pos_weight_decay": 0.0, "pos_decay_to": "none"}
    d["runs"] = [run("relbias", k, 0.99) for k in range(3)] + [run("relbias", 1, 0.25, **ramp)]
    d["runs"] += [run("learned", 0, 0.95), run("learned", 0, 0.89, **ramp)]
    d["runs"] += [run("rope2d+learned", k, v) for k, v in enumerate((0.95, 0.96, 0.97))]
    d["runs"] += [run("rope2d+learned", k, v, scale=1.0, **off) for k, v in enumerate((0.990, 0.992, 0.991))]
    d["runs"] += [run("rope2d+learned", 0, 0.985, **ramp)]  # one seed under the low end: short
    d["runs"] += [run("cpb", k, v) for k, v in enumerate((0.90, 0.97, 0.99))]  # mean under, not separated
    d["runs"] += [run("cpb", k, v, scale=1.0, **off) for k, v in enumerate((0.98, 0.985, 0.99))]
    short = tables(results.render(d, ROOT / "docs"))[3]
    assert short[0][1] == "under 90 %"
    assert short[1:] == [
        ["x 30, 0.3 to start (default)", "none", "`rope2d+learned` 96.0 [93.5, 98.5] (3) against [98.9, 99.3]", "10"],
        ["x 30, ramped over 3 epochs, 0.3 to start", "`learned` seed 0 (89.0); `relbias` seed 1 (25.0)",
         "`rope2d+learned` 98.5 (1) against [98.9, 99.3]", "3"],
    ]  # fmt: skip


def test_results_page_names_the_other_schemes_with_more_seeds():
    default = common.run_rule(json.loads((ROOT / "docs" / "results.json").read_text())["budget"], "default_")
    d = results_record()

    def run(pos: str, seed: int) -> dict:
        rule = dict(zip(("pos_lr_scale", "pos_weight_decay", "pos_decay_to", "pos_lr_warmup_epochs"), default,
                        strict=True))  # fmt: skip
        return {"spec": f"{pos}:patch", "pos": pos, "stem": "patch", "seed": seed, **rule, "pos_params": True,
                "best_val_top1": 0.9, "test_top1": 0.9, "train_seconds": 1.0}  # fmt: skip

    def named() -> tuple[list[str], bool]:
        """The schemes the headline's paragraph names beside the main runs, and whether it says every one."""
        para = next(p for p in results.render(d, ROOT / "docs").split("\n\n") if p.startswith("The six main runs"))
        tail = para.split("docs/fashion_mnist.md trains them too)")[1].split(". Cells:")[0]
        return re.findall(r"`[^`]+`", tail), "every other scheme" in tail

    d |= {"main_runs": ["learned:patch"], "top_others": ["cpb:patch"]}
    d["runs"] = [run(pos, k) for pos in ("learned", "cpb", "peg") for k in range(3)]
    assert named() == ([], True)
    d["runs"] += [run("liere", 0)]  # one other with seed 0 only: the page names those with more
    assert named() == (["`peg`"], False)
    d["runs"] += [run("alibi2d", k) for k in range(3)]
    assert named() == (["`peg`", "`alibi2d`"], False)


def test_published_claims_are_judged_by_the_intervals_here():
    """A published 'A above B' is 'agrees' or 'disagrees' only where the intervals separate."""
    recs = [transfer_record("lookhere", 64, v, k) for k, v in enumerate((0.80, 0.82, 0.81))]
    recs += [transfer_record("rope2d", 64, v, k) for k, v in enumerate((0.40, 0.42, 0.41))]
    recs += [transfer_record("rope2d-norm", 64, v, k) for k, v in enumerate((0.20, 0.21, 0.22))]
    recs += [transfer_record("liere", 64, 0.5), transfer_record("learned", 64, 0.4)]  # one seed each
    recs += [transfer_record(k, 96, 0.3) for k in ("lookhere", "rope2d")]  # one seed each: never a verdict
    said = {}
    for item in items(resolution.published_section(recs, 32)):
        m = re.match(r"At (\d+) px \([\d.]+x\), `(\S+)` above `(\S+)`.*?: (.*)\.$", item)
        said[int(m[1]), m[2], m[3]] = m[4]
    assert said[64, "lookhere", "rope2d"] == "agrees"
    assert said[96, "lookhere", "rope2d"] == "not separated (+0.0 points, one seed)"
    assert said[64, "rope2d-norm", "rope2d"] == "disagrees"
    assert said[64, "liere", "learned"] == "not separated (+10.0 points, one seed)"
    assert [v for (_, hi, lo), v in said.items() if (hi, lo) == ("rope2d-mixed", "learned")] == ["not measured here"]
    assert resolution.published_section(recs, 128) is None  # nothing at or above the training size


@pytest.mark.parametrize("ratio", [1.1, 1.5, "one step apart"])
def test_pos_dynamics_page_compares_each_run_with_the_first_step_by_step(tmp_path, ratio):
    """The ratio of each run's curves to `learned`'s at every step; "alike" only where every step's ratio is within
    ALIKE ("one step apart": alike at every step but the last, which is 2x)."""
    steps = list(range(0, 600, 10))
    apart = ratio == "one step apart"
    ratio = 1.0 if apart else ratio

    def run(pos: str, rule: str, k: float) -> dict:
        last = 2.0 if apart and pos != "learned" else 1.0
        return {"pos": pos, "rule": rule, "seed": 0, "test_top1": 0.9 if pos == "learned" else 0.95,
                "train_top1": 0.97, "step": steps, "rms": [0.02 * (1 + s / 600) * k for s in steps[:-1]]
                + [0.04 * k * last], "grad_rms": [1e-4 * k] * len(steps),
                "pos_lr_scale": 30.0 if rule == "default" else 1.0}  # fmt: skip

    d = record(budget={"epochs": 2, "batch_size": 8, "lr": 1e-3, "pos_lr_scale": 30.0},
               runs=[run(p, r, ratio if p != "learned" else 1.0) for r in ("default", "off")
                     for p in ("learned", "rope2d+learned")])  # fmt: skip
    page = pos_dynamics.render(d, tmp_path)
    runs, pairs = tables(page)
    assert len(runs) == 5 and [r[4] for r in runs[1:3]] == ["0.020 (step 0)", f"{0.02 * ratio:.3f} (step 0)"]
    same = f"{ratio:.2f} ({ratio:.2f} to {ratio:.2f})"  # median (lowest to highest) over the steps
    rms = f"{ratio:.2f} ({ratio:.2f} to 2.00)" if apart else same
    assert [r[2:] for r in pairs[1:]] == [[rms, same, "95.0 / 90.0"]] * 2
    alike = [p for p in page.split("\n\n") if "`rope2d+learned` under the default rule" in p]
    assert len(alike) == (1 if ratio < pos_dynamics.ALIKE and not apart else 0)
    assert (tmp_path / "pos_dynamics.png").stat().st_size > 0
