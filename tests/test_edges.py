"""Every entry point at its edges: what a user made is never deleted or replaced, an --out that cannot be made and
Ctrl-C are one line (exit 2 and 130), a full disk is one line that keeps the last good file, and what is printed can
be pasted back into a shell."""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import vitpos
from vitpos import diagnose, export
from vitpos.checkpoint import load_checkpoint
from vitpos.data import shard
from vitpos.evaluate import __main__ as evaluate
from vitpos.training import main as train

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--embed-dim", "32", "--depth", "1", "--num-heads", "2", "--train-size", "32", "--val-size", "16",
        "--test-size", "16", "--batch-size", "16", "--epochs", "1"]  # fmt: skip
SHARD = ["--data", "shapes", "--img-size", "16", "--train-size", "24", "--val-size", "8", "--test-size", "8",
         "--workers", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A trained run in a folder whose name has a space (printed commands must quote it)."""
    out = tmp_path_factory.mktemp("edges") / "my run"
    assert train(["--pos", "learned", *TINY, "--out", str(out)]) == 0
    return out


def one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def entry_points(run: Path, out: Path) -> dict:
    """name -> (main, argv writing into ``out``)."""
    ckpt = str(run / "checkpoints" / "last.ckpt")
    return {
        "train": (train, ["--pos", "none", *TINY, "--out", str(out)]),
        "evaluate": (evaluate.main, ["--ckpt", ckpt, "--resolutions", "32", "--limit", "4", "--out", str(out)]),
        "diagnose": (diagnose.main, ["--ckpt", ckpt, "--num-images", "4", "--out", str(out)]),
        "export": (export.main, ["--ckpt", ckpt, "--no-check", "--out", str(out / "m.onnx")]),
        "shard": (shard.main, [*SHARD, "--out", str(out)]),
    }


# -- an --out that cannot be made --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["train", "evaluate", "diagnose", "export", "shard"])
def test_an_out_under_a_file_is_one_line_before_any_work(name, run, tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    main, argv = entry_points(run, tmp_path / "file" / "out")[name]
    assert main(argv) == 2
    assert "is a file" in one_line(capsys.readouterr().err)
    assert (tmp_path / "file").read_text() == "mine"


# -- Ctrl-C ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, target",
    [("evaluate", "vitpos.evaluate.__main__.sweep_and_write"), ("diagnose", "vitpos.diagnose.diagnose"),
     ("export", "vitpos.export.export_onnx"), ("shard", "vitpos.data.shard.write_shards")],
)  # fmt: skip
def test_ctrl_c_in_an_entry_point_exits_130_in_one_line(name, target, run, tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupted)
    main, argv = entry_points(run, tmp_path / "out")[name]
    assert main(argv) == 130
    assert "interrupted" in one_line(capsys.readouterr().err)


def test_ctrl_c_while_the_shard_writer_works_exits_130_in_one_line_naming_the_command_that_continues(tmp_path):
    """A real Ctrl-C reaches every process of the terminal's group (LitData's own handler would exit 0)."""
    args = ["--data", "shapes", "--img-size", "16", "--train-size", "20000", "--splits", "train", "--workers", "2",
            "--out", str(tmp_path / "sh")]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "vitpos.data.shard", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True)  # fmt: skip
    for line in proc.stderr:
        if "images ->" in line:  # the writer has started
            break
    time.sleep(1)
    assert proc.poll() is None, "the writer ended before the signal; make it longer"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    (said,) = [ln for ln in err.splitlines() if "vitpos.data.shard: interrupted" in ln]
    assert said.startswith("vitpos.data.shard: interrupted")  # on a line of its own
    assert said.endswith(shlex.join(["python", "-m", "vitpos.data.shard", *args]))


# -- a full disk -------------------------------------------------------------------------------------------------
def limited(max_bytes: int):
    """preexec_fn: files of the process may not grow beyond ``max_bytes`` (Python ignores SIGXFSZ: writes fail)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_checkpoint_that_cannot_be_written_is_one_line_keeps_the_last_one_and_says_how_to_resume(
    tmp_path, capsys, monkeypatch
):
    import errno

    import vitpos.checkpoint

    out, real_save, saves = tmp_path / "run", torch.save, []

    def full_after_the_first_epoch(obj, f, *a, **k):  # epoch 0 writes best and last; the disk is full after
        saves.append(1)
        if len(saves) > 2:
            f.write(b"half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(vitpos.checkpoint.torch, "save", full_after_the_first_epoch)
    assert train(["--pos", "learned", *TINY, "--epochs", "2", "--out", str(out)]) == 2
    line = one_line(capsys.readouterr().err.splitlines()[-1])
    last = out / "checkpoints" / "last.ckpt"
    named = rf"train.py: error: cannot write {out}/checkpoints/(last|best-epoch\d+)\.ckpt: No space"
    assert re.match(named, line), line  # the checkpoint's name, not its temporary file's
    assert "disk is full" in line
    assert line.endswith(f"last checkpoint kept ({last}); resume with: python train.py --resume --out {out}")
    assert load_checkpoint(last)["global_step"] == 2  # the first epoch's, whole
    assert not [p for p in last.parent.iterdir() if p.name.startswith(".")]  # no temporary file left
    monkeypatch.setattr(vitpos.checkpoint.torch, "save", real_save)  # room again: the printed command continues
    assert train(shlex.split(line.split("resume with: ")[1])[2:]) == 0
    assert load_checkpoint(last)["global_step"] == 4


def test_a_shard_that_cannot_be_written_is_one_line_and_the_same_command_continues(tmp_path):
    out = tmp_path / "sh"
    cmd = [sys.executable, "-m", "vitpos.data.shard", *SHARD[:-3], "--train-size", "400", "--workers", "1",
           "--quiet", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, preexec_fn=limited(20_000))
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert "train: " in line and "file-size limit" in line and "run the same command again" in line, line
    assert not (out / "train").exists()  # the broken split is gone; a rerun writes it again
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    from litdata import StreamingDataset

    assert sorted(s["index"] for s in StreamingDataset(str(out / "train"))) == list(range(400))


# -- what a user made ----------------------------------------------------------------------------------------------
def test_overwrite_never_deletes_a_users_files_in_any_entry_point(run, tmp_path, capsys):
    for name in ("evaluate", "diagnose", "shard"):
        out = tmp_path / name
        (out / "notes").mkdir(parents=True)
        (out / "thesis.txt").write_text("mine")
        for result in ("resolution.json", "diagnostics.json"):  # a file of the user's under a result's name
            (out / result).write_text('{"mine": 1}')
        main, argv = entry_points(run, out)[name]
        assert main([*argv, "--overwrite"]) == 2
        assert "did not write" in one_line(capsys.readouterr().err), name
        assert (out / "thesis.txt").read_text() == "mine" and (out / "notes").is_dir(), name
        assert json.loads((out / "resolution.json").read_text()) == {"mine": 1}, name
    # train.py moves what --out holds aside, whole
    out = tmp_path / "train"
    (out / "notes").mkdir(parents=True)
    (out / "thesis.txt").write_text("mine")
    assert train(["--pos", "none", *TINY, "--out", str(out), "--overwrite"]) == 0
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("train.old-")]
    assert (aside / "thesis.txt").read_text() == "mine" and (aside / "notes").is_dir()


def test_shard_overwrite_replaces_only_shards_and_never_the_source_it_reads(tmp_path, capsys):
    out = tmp_path / "sh"
    assert shard.main([*SHARD, "--out", str(out)]) == 0
    assert shard.main([*SHARD, "--out", str(out), "--overwrite", "--seed", "1"]) == 0  # its own: rewritten
    assert json.loads((out / "meta.json").read_text())["shuffle"] == {"train": 1}
    capsys.readouterr()
    folder = tmp_path / "folder"  # the source itself as --out: an image folder is not a shard folder
    for split in ("train", "val"):
        (folder / split / "a").mkdir(parents=True)
        (folder / split / "b").mkdir(parents=True)
        for c in "ab":
            torch.manual_seed(0)
            from PIL import Image

            Image.new("RGB", (8, 8)).save(folder / split / c / "0.png")
    argv = ["--data", "imagefolder", "--data-dir", str(folder), "--out", str(folder), "--overwrite", "--quiet"]
    assert shard.main(argv) == 2
    assert "train/, val/" in one_line(capsys.readouterr().err)
    assert sorted(p.name for p in folder.rglob("*.png")) == ["0.png"] * 4


def test_chunk_bytes_that_is_no_size_is_one_line_and_leaves_nothing(tmp_path, capsys):
    assert shard.main([*SHARD, "--out", str(tmp_path / "sh"), "--chunk-bytes", "bogus"]) == 2
    assert "--chunk-bytes must be a size" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "sh").exists()


def test_evaluate_and_diagnose_replace_their_own_results_when_asked(run, tmp_path, capsys):
    for name in ("evaluate", "diagnose"):
        main, argv = entry_points(run, tmp_path / name)[name]
        assert main(argv) == 0
        capsys.readouterr()
        assert main(argv) == 2 and "--overwrite" in one_line(capsys.readouterr().err)
        assert main([*argv, "--overwrite"]) == 0, name


# -- what is printed -----------------------------------------------------------------------------------------------
def test_printed_paths_are_quoted_in_one_style_and_the_next_command_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train(["--pos", "learned", *TINY, "--out", "my run", "--eval-resolutions", "32", "24x40"]) == 0
    printed = capsys.readouterr().out
    assert "'my run/checkpoints/last.ckpt' (last), 'my run/checkpoints/best-epoch000.ckpt' (best)" in printed
    records = json.loads((tmp_path / "my run" / "resolution" / "resolution.json").read_text())
    assert {(r["height"], r["width"]) for r in records} == {(32, 32), (24, 40)}  # HxW, as the evaluator takes
    (next_line,) = [ln for ln in printed.splitlines() if ln.startswith("vitpos: next: ")]
    python, flag, module, *argv = shlex.split(next_line.removeprefix("vitpos: next: "))
    assert (python, flag) == ("python", "-m")
    mains = {"vitpos.evaluate": evaluate.main, "vitpos.diagnose": diagnose.main}
    assert mains[module](argv) == 0  # runnable as printed, also after the sweep took RUN/resolution/


def test_fast_dev_run_writes_nothing_and_says_so(tmp_path, capsys):
    assert train(["--pos", "none", *TINY, "--fast-dev-run", "--out", str(tmp_path / "never")]) == 0
    assert "out=- (--fast-dev-run writes nothing)" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_the_shard_tool_prints_no_advert_and_its_last_line_quotes_the_out(tmp_path, capsys):
    out = tmp_path / "my shards"
    assert shard.main([*SHARD[:-1], "--out", str(out)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("vitpos.data.shard: shapes (") and line.endswith(f"; train 24, val 8, test 8) in '{out}'")


# -- sizes checked where a model is built ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, needle",
    [({"num_heads": 0}, "num_heads must be a positive integer"), ({"embed_dim": 0}, "embed_dim must be a positive"),
     ({"embed_dim": 30, "num_heads": 4}, "not divisible by num_heads 4"), ({"depth": 0}, "depth must be")],
)  # fmt: skip
def test_create_model_checks_its_sizes_in_one_line(kw, needle):
    with pytest.raises(ValueError, match=needle):
        vitpos.create_model("rope2d", **kw)


def test_a_checkpoint_loads_after_these_changes(run):
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] > 0
