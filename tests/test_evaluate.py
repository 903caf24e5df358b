"""The resolution-transfer evaluator: transfer methods at the model level, the sweep, DDP counting, the CLI
and the notebook. One tiny checkpoint (rope2d, 16 px, 45 validation images) serves the whole module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_notebook

import vitpos
from vitpos import evaluate as ev
from vitpos.config import Config

ROOT = Path(__file__).resolve().parents[1]
VAL_SIZE = 45  # odd: a DistributedSampler on 2 ranks would pad it to 46
TRAIN_RES = 16


def _env() -> dict[str, str]:
    # this checkout first, then whatever the caller's path adds (packages installed to a folder of their own)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")  # fmt: skip
    env.pop("VITPOS_RUN_OUT", None)
    return env


def _run_cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vitpos.evaluate", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """Train rope2d for 4 steps through training.run, which also runs its own sweep (the train.py hook)."""
    from vitpos.rundir import OUT_ENV
    from vitpos.training import run

    out = tmp_path_factory.mktemp("evaluate") / "run"
    cfg = Config()
    m, d = cfg.model, cfg.data
    m.pos, m.img_size, m.embed_dim, m.depth, m.num_heads = "rope2d", TRAIN_RES, 32, 2, 2
    d.train_size, d.val_size, d.test_size, d.batch_size = 256, VAL_SIZE, 16, 64
    cfg.optim.epochs = 1
    cfg.trainer.out = str(out)
    cfg.trainer.eval_resolutions = [TRAIN_RES, 24]
    saved = os.environ.pop(OUT_ENV, None)  # run() hands its folder on through this variable
    try:
        run(cfg)
    finally:
        os.environ.pop(OUT_ENV, None)
        if saved is not None:
            os.environ[OUT_ENV] = saved
    return out


@pytest.fixture(scope="session")
def ckpt(tiny_run) -> Path:
    return tiny_run / "checkpoints" / "last.ckpt"


def _model(pos: str) -> vitpos.ViT:
    torch.manual_seed(0)
    return vitpos.create_model(pos, img_size=TRAIN_RES, embed_dim=32, depth=2, num_heads=2, num_classes=5).eval()


# -- methods at the model level -------------------------------------------------------------------
@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_every_method_is_the_trained_model_at_the_training_grid(pos, one_thread):
    model = _model(pos)
    x = torch.randn(3, 3, TRAIN_RES, TRAIN_RES)
    with torch.no_grad():
        reference = model(x)  # default method
        for method in model.pos.methods:
            model.pos.method = method
            assert torch.equal(model(x), reference), f"{pos}/{method} changes the model at its training grid"


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
@pytest.mark.parametrize("hw", [(24, 24), (8, 8), (16, 28)])
def test_every_method_at_a_new_grid_is_finite_and_deterministic(pos, hw, one_thread):
    model = _model(pos)
    x = torch.randn(2, 3, *hw)
    with torch.no_grad():
        for method in model.pos.methods:
            model.pos.method = method
            first = model(x)
            model.pos.method = method  # clears the scheme's cache: the second call recomputes
            assert torch.isfinite(first).all(), f"{pos}/{method} at {hw}"
            assert torch.equal(model(x), first), f"{pos}/{method} at {hw} is not deterministic"


def test_evaluate_model_restores_the_default_method(ckpt, one_thread):
    from vitpos.checkpoint import model_from_checkpoint

    _, model = model_from_checkpoint(ckpt)
    data = torch.utils.data.TensorDataset(torch.randn(5, 3, 24, 24), torch.zeros(5, dtype=torch.long))
    counts = ev.evaluate_model(model, [(data, "ntk"), (data, "yarn")], ev.make_trainer(), batch_size=2)
    assert [n for _, n in counts] == [5, 5]
    assert model.pos.method == model.pos.methods[0]


# -- inputs ---------------------------------------------------------------------------------------
def test_parse_resolution():
    assert ev.parse_resolution("32") == 32
    assert ev.parse_resolution("24x48") == (24, 48)
    assert ev.parse_resolution("32x32") == 32
    for bad in ("0", "-8", "abc", "24x", "0x8"):
        with pytest.raises(ev.ConfigError):
            ev.parse_resolution(bad)


@pytest.mark.parametrize("text", ["32", "24x48", "48x24"])
def test_resolution_label_reads_back_as_the_same_resolution(text):
    from vitpos.resolution import parse_resolution, resolution_label, to_hw

    r = parse_resolution(text)
    assert parse_resolution(resolution_label(r)) == r and resolution_label(to_hw(r)) == resolution_label(r)


def test_the_evaluation_sampler_covers_every_index_once():
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

    shards = [list(UnrepeatedDistributedSampler(range(45), num_replicas=4, rank=r, shuffle=False)) for r in range(4)]
    assert sorted(sum(shards, [])) == list(range(45))
    assert [len(s) for s in shards] == [12, 11, 11, 11]


# -- the sweep ------------------------------------------------------------------------------------
def test_sweep_writes_a_record_per_resolution_and_method(ckpt, tmp_path, one_thread):
    records = ev.sweep_and_write([ckpt], [8, 16, 24, 32, "16x24"], tmp_path)
    methods = vitpos.POS_REGISTRY["rope2d"].methods
    got = {(r["resolution"], r["method"]) for r in records}
    assert got == {(res, m) for res in (8, 16, 24, 32, "16x24") for m in methods}
    assert len(records) == len(got)
    for r in records:
        assert r["samples"] == VAL_SIZE and 0.0 <= r["top1"] <= 1.0
        assert (r["scheme"], r["stem"], r["train_resolution"], r["checkpoint"]) == ("rope2d", "patch", 16, str(ckpt))
        assert r["train_resolutions"] == [16]  # single-resolution training
    non_square = [r for r in records if r["resolution"] == "16x24"]
    assert {(r["height"], r["width"], r["grid"]) for r in non_square} == {(16, 24, "4x6")}
    # At the training resolution every method is the trained model: identical counts.
    assert len({r["correct"] for r in records if r["resolution"] == TRAIN_RES}) == 1

    on_disk = json.loads((tmp_path / "resolution.json").read_text())
    assert on_disk == records
    for name in ev.RESULT_FILES:
        assert (tmp_path / name).stat().st_size > 0
    csv_lines = (tmp_path / "resolution.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(records) and csv_lines[0].startswith("checkpoint,scheme,stem,method")
    md = (tmp_path / "resolution.md").read_text()
    assert md.endswith(ev.markdown_table(records))  # the page's table is the records' table
    table = [line for line in md.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    runs = {(r["checkpoint"], r["method"]) for r in records}
    columns = {(r["height"], r["width"]) for r in records}
    assert len(table) == 2 + len(runs) and all(len(c) == 2 + len(columns) for c in cells)  # a row per run x method
    top1 = sorted(f"{100 * r['top1']:.1f}" for r in records)
    assert sorted(c.strip("*") for row in cells[2:] for c in row[2:] if c) == top1  # every result once, as %
    assert (tmp_path / "resolution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with pytest.raises(ev.ConfigError, match="already holds"):  # never silently overwritten
        ev.sweep_and_write([ckpt], [16], tmp_path)


def test_training_run_hook_wrote_its_sweep(tiny_run):
    records = ev.load_records(tiny_run / "resolution")
    assert {r["resolution"] for r in records} == {TRAIN_RES, 24}


def test_methods_a_scheme_lacks_are_skipped_and_unknown_ones_fail(ckpt, capsys, one_thread):
    records = ev.sweep([ckpt], [24], methods=["interpolate", "bicubic"])  # bicubic: only `learned` has it
    assert [r["method"] for r in records] == ["interpolate"]
    assert "has no method bicubic; skipped" in capsys.readouterr().err
    with pytest.raises(ev.ConfigError, match="nothing to evaluate"):
        ev.sweep([ckpt], [24], methods=["bicubic"])
    with pytest.raises(ev.ConfigError, match="unknown method"):
        ev.sweep([ckpt], [24], methods=["telepathy"])


def test_sweep_rejects_a_resolution_the_patch_size_does_not_divide(ckpt):
    with pytest.raises(ev.ConfigError, match="multiple of the patch size"):
        ev.sweep([ckpt], [18])


# -- distributed ----------------------------------------------------------------------------------
@pytest.mark.cli
@pytest.mark.ddp
def test_ddp_on_two_cpu_processes_counts_every_image_once(ckpt, tmp_path, one_thread):
    resolutions = ["12", "16", "16x24"]
    single = ev.sweep([ckpt], resolutions, methods=["extrapolate", "interpolate"])
    proc = _run_cli("--ckpt", str(ckpt), "--resolutions", *resolutions, "--methods", "extrapolate", "interpolate",
                    "--devices", "2", "--strategy", "ddp", "--batch-size", "8", "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    double = json.loads((tmp_path / "resolution.json").read_text())
    key = ("resolution", "method", "top1", "correct", "samples")
    got, want = [[r[k] for k in key] for r in double], [[r[k] for k in key] for r in single]
    assert got == want, f"devices=2 {got}\ndevices=1 {want}\n{proc.stderr[-3000:]}"
    assert all(r["samples"] == VAL_SIZE for r in double)


@pytest.mark.cli
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_ddp_on_one_device_counts_every_image_once(ckpt, tmp_path):
    """DDP on one CUDA device (the strategy a multi-GPU run starts with) counts every image exactly once, as the
    single-process CPU sweep does."""
    resolutions = ["12", "16", "16x24"]
    single = ev.sweep([ckpt], resolutions, methods=["extrapolate"])
    proc = _run_cli("--ckpt", str(ckpt), "--resolutions", *resolutions, "--methods", "extrapolate",
                    "--accelerator", "gpu", "--devices", "1", "--strategy", "ddp", "--batch-size", "8",
                    "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    cuda = json.loads((tmp_path / "resolution.json").read_text())
    assert [(r["resolution"], r["samples"]) for r in cuda] == [(r["resolution"], VAL_SIZE) for r in single]
    # fp32 on another device: the same predictions but for a near-tie's rounding
    assert all(abs(a["correct"] - b["correct"]) <= 1 for a, b in zip(cuda, single, strict=True))


# -- command line ---------------------------------------------------------------------------------
def _one_line_error(proc_or_err, code=None):
    err = proc_or_err if isinstance(proc_or_err, str) else proc_or_err.stderr
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1 and "error" in lines[0], err
    return lines[0]


@pytest.mark.cli
def test_cli_missing_and_foreign_checkpoints_fail_in_one_line(tmp_path, capsys):
    missing = _run_cli("--ckpt", str(tmp_path / "nope.ckpt"), "--resolutions", "32")  # the real process
    assert missing.returncode != 0
    assert "checkpoint not found" in _one_line_error(missing)

    foreign = tmp_path / "foreign.ckpt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    assert ev.main(["--ckpt", str(foreign), "--resolutions", "32"]) == 2
    assert "not a vitpos checkpoint" in _one_line_error(capsys.readouterr().err)
    assert ev.main(["--resolutions", "32"]) == 2  # no model at all
    assert "nothing to evaluate" in _one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resolutions", "0"], "positive"),
        (["--resolutions", "-16"], "positive"),
        (["--resolutions", "big"], "integer R or HxW"),
        (["--resolutions", "18"], "multiple of the patch size"),
        (["--resolutions", "16", "--methods", "telepathy"], "unknown method"),
        (["--resolutions", "16", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_cli_bad_input_fails_in_one_line(ckpt, tmp_path, capsys, args, message):
    code = ev.main(["--ckpt", str(ckpt), "--out", str(tmp_path), *args])
    assert code != 0
    assert message in _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "resolution.json").exists()


def test_cli_corrupt_checkpoint_and_overwrite(ckpt, tmp_path, capsys):
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(ckpt.read_bytes()[:1000])
    assert ev.main(["--ckpt", str(broken), "--resolutions", "16"]) == 2
    assert "truncated or corrupt" in _one_line_error(capsys.readouterr().err)

    out = tmp_path / "out"
    assert ev.main(["--ckpt", str(ckpt), "--resolutions", "16", "--methods", "yarn", "--out", str(out)]) == 0
    capsys.readouterr()
    assert ev.main(["--ckpt", str(ckpt), "--resolutions", "16", "--out", str(out)]) == 2
    assert "--overwrite" in _one_line_error(capsys.readouterr().err)
    assert ev.main(["--ckpt", str(ckpt), "--resolutions", "24", "--out", str(out), "--overwrite"]) == 0
    assert {r["resolution"] for r in ev.load_records(out)} == {24}


def test_default_out_is_beside_the_run(ckpt, tmp_path):
    run = ckpt.parent.parent
    assert ev.default_out(ckpt) == run / "resolution"  # where train.py --eval-resolutions writes its sweep
    assert ev.default_out(run / "checkpoints" / "best-epoch003.ckpt") == run / "resolution-best-epoch003"
    assert ev.default_out(tmp_path / "model.ckpt") == tmp_path / "model-resolution"
    assert ev.default_out(ckpt, "diagnostics") == run / "diagnostics"


def test_cli_shows_progress_one_line_per_job(ckpt, tmp_path, capsys, one_thread):
    assert ev.main(["--ckpt", str(ckpt), "--resolutions", "16", "24", "--out", str(tmp_path), "--limit", "4"]) == 0
    progress = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("vitpos.evaluate: [")]
    methods = vitpos.POS_REGISTRY["rope2d"].methods
    expected = [f"{r} px (zoom), method {m}" for r in (16, 24) for m in methods]
    assert len(progress) == len(expected)
    for i, (line, tail) in enumerate(zip(progress, expected), 1):
        assert line.startswith(f"vitpos.evaluate: [{i}/{len(expected)}] {ckpt}: rope2d/patch at ") and line.endswith(
            tail
        )


def test_cli_text_file_as_checkpoint_and_bad_trainer_names_are_one_line(tmp_path, ckpt, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert ev.main(["--ckpt", str(text), "--resolutions", "16"]) == 2
    assert "truncated or corrupt" in _one_line_error(capsys.readouterr().err)
    bad = [(["--precision", "bf17"], "unknown --precision"), (["--strategy", "dpp"], "unknown --strategy"),
           (["--accelerator", "tpu9"], "unknown --accelerator")]  # fmt: skip
    for args, needle in bad:
        assert ev.main(["--ckpt", str(ckpt), "--resolutions", "16", "--out", str(tmp_path / "o"), *args]) == 2
        assert needle in _one_line_error(capsys.readouterr().err)


def test_help_lists_methods_and_names(capsys):
    with pytest.raises(SystemExit):
        ev.build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for needle in ("extrapolate", "bicubic", "ntk", "yarn", "resize", "continuous", "fashion-mnist", "bf16-mixed",
                   "ddp", "(default: val)"):  # fmt: skip
        assert needle in text


def test_plot_spans_0_to_100_with_chance_and_keeps_coinciding_methods_apart():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [
        {"checkpoint": "a.ckpt", "scheme": "rope2d", "stem": "patch", "method": m, "resolution": r, "height": r,
         "width": r, "train_resolution": 32, "top1": 0.6, "samples": 10, "num_classes": 8}
        for m in ("extrapolate", "interpolate") for r in (24, 32, 48)
    ]  # fmt: skip
    fig, ax = plt.subplots()
    ev.plot(records, ax)
    assert ax.get_ylim() == (0, 100)
    (chance,) = [ln for ln in ax.lines if ln.get_label().startswith("chance")]
    assert list(chance.get_ydata()) == [12.5, 12.5] and chance.get_label() == "chance (12.5 %)"
    a, b = [ln for ln in ax.lines if "·" in ln.get_label()]
    assert list(a.get_ydata()) == list(b.get_ydata())  # the two methods coincide ...
    assert a.get_linestyle() != b.get_linestyle() and a.get_marker() != b.get_marker()  # ... and stay apart
    assert a.get_markersize() > b.get_markersize() and a.get_linewidth() > b.get_linewidth()  # the first shows under
    plt.close(fig)


# -- notebook -------------------------------------------------------------------------------------
def test_notebook_executes_on_a_tiny_result(tmp_path, monkeypatch):
    records = [
        {"checkpoint": f"runs/{pos}/last.ckpt", "scheme": pos, "stem": "patch", "method": m, "resolution": r,
         "height": r, "width": r, "train_resolution": 32, "top1": 0.5 + 0.01 * r / 8, "samples": 10}
        for pos, methods in (("rope2d", ("extrapolate", "ntk")), ("learned", ("bicubic",)))
        for m in methods
        for r in (24, 32, 48)
    ]  # fmt: skip
    path = tmp_path / "resolution.json"
    path.write_text(json.dumps(records))
    text = run_notebook("resolution_transfer.ipynb", monkeypatch, timeout=120, VITPOS_RESOLUTION_JSON=str(path))
    assert "rope2d/patch" in text and "bicubic" in text
