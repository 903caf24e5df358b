"""The pages of the benchmarks' records (performance, export, data, diagnostics, pos_dynamics): table cells, row
counts, the links and figures written. No prose."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, record, rows, tables

from benchmarks.pages import __main__ as pages
from benchmarks.pages import common, data, pos_dynamics

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
FIGURES = {
    "pos_dynamics": ["pos_dynamics.png"],
    "performance": [],
    "performance_compile": [],
    "export": [],
    "data": [],
    "diagnostics": [],
    "gpu": [],
}


# every page whose record is measured (one not yet measured names its command in the catalogue: test_catalogue.py)
@pytest.mark.parametrize("page", [p for p in pages.PAGES if (ROOT / "docs" / f"{p}.json").is_file()])
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
    page = pages.PAGES["diagnostics"](DIAGNOSTICS, Path("/nonexistent"))  # no rules.json: no rule line
    assert len([p for p in page.split("\n\n") if p.strip()]) == 4  # title, made by, how, table


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
