"""Shared benchmark plumbing: a finished sweep is reused only for the same command on unchanged checkpoints."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from helpers import ROOT  # noqa: E402


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import common
    import fashion_mnist  # noqa: F401  (imports its helpers from common)

    return common


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


def test_mean_ci_is_the_t_interval_and_separation_needs_disjoint_intervals(bench):
    mean, lo, hi = bench.mean_ci([0.90, 0.92, 0.94])
    assert mean == pytest.approx(0.92) and hi - mean == pytest.approx(4.303 * 0.02 / 3**0.5)
    assert lo == pytest.approx(2 * mean - hi)
    assert all(v != v for v in bench.mean_ci([0.5])[1:])  # one seed: no interval
    assert bench.separated([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert not bench.separated([0.90, 0.91, 0.92], [0.88, 0.90, 0.95])  # overlapping intervals
    assert not bench.separated([0.99], [0.10, 0.11])  # one seed: never "beats"


@pytest.mark.parametrize("page", ["results", "resolution", "fashion_mnist", "performance", "export", "data"])
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
