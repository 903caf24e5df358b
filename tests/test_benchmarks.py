"""Shared benchmark plumbing: a finished sweep is reused only for the same command on unchanged checkpoints."""

from __future__ import annotations

import json
import os

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
    bench.record_sweep(cmd, sweep_dir)
    assert json.loads((sweep_dir / "command.json").read_text()) == cmd
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


def test_data_page_is_rendered_from_its_json_and_derives_workers_from_it(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import data_loading

    record = json.loads((ROOT / "docs" / "data.json").read_text())
    assert data_loading.render(record) == (ROOT / "docs" / "data.md").read_text()  # the page matches its data
    per_core = record["measured"]["shards"]["img_per_cpu_s"]
    need = data_loading.GPUS_PER_NODE * record["published"]["train_img_per_s"]
    workers = record["workers_per_node"]["shards"]
    assert (workers - 1) * per_core < need <= workers * per_core  # the fewest one-core workers that keep up
