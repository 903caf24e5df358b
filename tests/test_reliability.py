"""Reliability: kill-and-resume, DDP on two CPU processes, non-finite loss, safe and clear checkpoint loading."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vitpos.checkpoint import FORMAT, load_checkpoint, model_from_checkpoint
from vitpos.config import ConfigError
from vitpos.lit import LitViT
from vitpos.training import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--embed-dim", "32", "--depth", "1", "--num-heads", "2", "--val-size", "32", "--test-size", "32"]


def train_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "--pos", "learned", "--out", str(out), *TINY, *extra]


def run_cmd(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


# -- resume after SIGKILL ----------------------------------------------------------------------------------------


def test_sigkill_then_resume_reaches_the_same_step_and_weights(tmp_path):
    args = ["--epochs", "3", "--train-size", "1024", "--batch-size", "32"]  # 32 steps an epoch
    full, killed = tmp_path / "full", tmp_path / "killed"
    r = run_cmd(train_cmd(full, *args))
    assert r.returncode == 0, r.stderr[-2000:]

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(train_cmd(killed, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=ROOT)  # fmt: skip
    last = killed / "checkpoints" / "last.ckpt"
    deadline = time.time() + 240
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)  # a real crash: no handler runs
    proc.wait()
    assert not (killed / "results.json").exists()
    step_at_kill = load_checkpoint(last)["global_step"]
    assert 0 < step_at_kill < 96

    r = run_cmd([*train_cmd(killed, *args), "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert results(killed)["global_step"] == results(full)["global_step"] == 96
    # RNG states travel in the checkpoint, so the resumed run retraces the uninterrupted one.
    _, m_full = model_from_checkpoint(full / "checkpoints" / "last.ckpt")
    _, m_killed = model_from_checkpoint(killed / "checkpoints" / "last.ckpt")
    for (name, a), b in zip(m_full.state_dict().items(), m_killed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_ckpt_every_n_steps_writes_last_mid_epoch(tmp_path):
    out = tmp_path / "run"
    assert main(["--pos", "none", "--out", str(out), *TINY, "--epochs", "1", "--train-size", "256",
                 "--batch-size", "32", "--ckpt-every-n-steps", "3"]) == 0  # fmt: skip
    assert load_checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 8


# -- distributed on the CPU --------------------------------------------------------------------------------------


def test_ddp_two_cpu_processes_trains_and_its_checkpoint_loads(tmp_path):
    out = tmp_path / "ddp"
    r = run_cmd(train_cmd(out, "--epochs", "1", "--train-size", "256", "--batch-size", "16", "--devices", "2",
                          "--strategy", "ddp"))  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "global batch = 16 per device x 2 devices x 1 nodes = 32" in r.stdout
    # 256 images, 16 per device, 2 ranks: each rank sees its own 128-image shard -> 8 steps.
    assert results(out)["global_step"] == 8
    cfg, model = model_from_checkpoint(out / "checkpoints" / "last.ckpt")
    assert cfg.trainer.devices == 2 and model(torch.randn(1, 3, 32, 32)).shape == (1, 8)


# -- non-finite loss ---------------------------------------------------------------------------------------------


def test_non_finite_loss_stops_with_a_message_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real_step = LitViT.training_step

    def poisoned(self, batch, batch_idx):
        if self.current_epoch == 1:  # the first epoch trains and checkpoints normally
            batch = (batch[0] * float("nan"), batch[1])
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(LitViT, "training_step", poisoned)
    code = main(["--pos", "rope2d", "--out", str(out), *TINY, "--epochs", "3", "--train-size", "64",
                 "--batch-size", "32"])  # fmt: skip
    assert code == 3
    err = capsys.readouterr().err
    assert "non-finite training loss" in err and "Traceback" not in err
    assert load_checkpoint(out / "checkpoints" / "last.ckpt")["epoch"] == 0  # the good epoch-0 checkpoint


# -- checkpoints: bad files and hostile pickles -----------------------------------------------------------------


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("good") / "run"
    assert main(["--pos", "sincos2d", "--out", str(out), *TINY, "--epochs", "1", "--train-size", "32",
                 "--batch-size", "16"]) == 0  # fmt: skip
    return out / "checkpoints" / "last.ckpt"


def bad_files(tmp: Path, good: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp / "empty.ckpt"
    empty.write_bytes(b"")
    truncated = tmp / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    foreign = tmp / "foreign.ckpt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    text = tmp / "text.ckpt"
    text.write_text("not a checkpoint at all\n")
    return {
        "missing": (tmp / "missing.ckpt", "not found"),
        "empty": (empty, "empty"),
        "truncated": (truncated, "truncated or corrupt"),
        "foreign": (foreign, "not a vitpos checkpoint"),
        "text": (text, "truncated or corrupt"),
    }


def test_checkpoints_carry_their_format(good_ckpt):
    assert torch.load(good_ckpt, weights_only=True)["vitpos_format"] == FORMAT


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "foreign", "text"])
def test_bad_checkpoint_is_a_clear_error(kind, good_ckpt, tmp_path):
    path, needle = bad_files(tmp_path, good_ckpt)[kind]
    with pytest.raises(ConfigError, match=needle) as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)


def test_bad_checkpoint_on_resume_is_one_line(good_ckpt, tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    truncated = good_ckpt.read_bytes()[:1000]
    (out / "checkpoints" / "last.ckpt").write_bytes(truncated)
    assert main(["--resume", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "truncated or corrupt" in err and len(err.splitlines()) == 1
    assert (out / "checkpoints" / "last.ckpt").read_bytes() == truncated  # the user's file is left alone


class RunsACommand:
    """Pickles to a call of os.system: loading it with full unpickling would run the command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_checkpoint_is_refused_and_never_runs_code(good_ckpt, tmp_path, capsys):
    marker = tmp_path / "pwned"
    ckpt = torch.load(good_ckpt, weights_only=True)
    ckpt["hyper_parameters"]["payload"] = RunsACommand(marker)
    evil = tmp_path / "evil.ckpt"
    torch.save(ckpt, evil)
    # the sanity check that the payload is live: a full unpickle would run it (not done here), and the pickle
    # really references os.system
    assert b"system" in evil.read_bytes()

    with pytest.raises(ConfigError, match="refused"):
        load_checkpoint(evil)
    # through resume, too: Lightning's restore goes through the same safe loader
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(evil.read_bytes())
    assert main(["--resume", "--out", str(out)]) == 2
    assert "refused" in capsys.readouterr().err
    assert not marker.exists()


# -- atomic writes and never overwriting a run -------------------------------------------------------------------


def test_a_save_that_dies_midway_leaves_the_old_checkpoint_intact(good_ckpt, tmp_path, monkeypatch):
    from vitpos.checkpoint import AtomicCheckpointIO

    target = tmp_path / "last.ckpt"
    target.write_bytes(good_ckpt.read_bytes())
    real_save = torch.save

    def dies_midway(obj, f, *a, **kw):
        f.write(b"PK\x03\x04 half a zip")  # some bytes reach the disk, then the process 'dies'
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        AtomicCheckpointIO().save_checkpoint({"state_dict": {}}, target)
    monkeypatch.setattr(torch, "save", real_save)
    assert target.read_bytes() == good_ckpt.read_bytes()  # untouched
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temp file left behind
    load_checkpoint(target)


def test_overwrite_moves_the_earlier_run_aside(tmp_path, capsys):
    from vitpos.config import Config
    from vitpos.training import resolve_out

    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(b"the user's work")
    cfg = Config()
    cfg.trainer.out = str(out)
    with pytest.raises(ConfigError, match="already holds a run"):
        resolve_out(cfg)
    cfg.trainer.overwrite = True
    assert resolve_out(cfg) == out and not out.exists()
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert (aside / "checkpoints" / "last.ckpt").read_bytes() == b"the user's work"
    assert str(aside) in capsys.readouterr().err
