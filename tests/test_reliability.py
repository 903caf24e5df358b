"""Reliability: kill-and-resume (weights and metrics history), Ctrl-C, refused resumes, the run-folder lock,
unfinished starts, zero-step runs, DDP on two CPU processes, non-finite loss, safe and clear checkpoint loading."""

from __future__ import annotations

import csv
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
from vitpos.errors import ConfigError
from vitpos.lit import LitViT
from vitpos.rundir import LOCK, RUN_CONFIG_HEADER, RunLock, release_lock
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


def metrics(out: Path) -> list[dict[str, str]]:
    with (out / "logs" / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` (but the lock): its bytes and modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK}  # fmt: skip


METRIC_ATOL = 1e-5  # a resumed run retraces the uninterrupted one (same RNG states), up to float noise
WEIGHTS = dict(rtol=1e-5, atol=1e-6)  # and so do its weights


# -- resume after SIGKILL ----------------------------------------------------------------------------------------
RUN_TIMEOUT = 1200  # a guard against a hung run, not a synchronisation: a 3-epoch run took 80 s at load 2 on 2 cores
TWO_RUNS = pytest.mark.timeout(2 * RUN_TIMEOUT)  # a test that trains twice, each under RUN_TIMEOUT


@pytest.mark.cli
@TWO_RUNS
def test_sigkill_then_resume_reaches_the_same_step_and_weights(tmp_path):
    args = ["--epochs", "3", "--train-size", "1024", "--batch-size", "32"]  # 32 steps an epoch
    full, killed = tmp_path / "full", tmp_path / "killed"
    r = run_cmd(train_cmd(full, *args), timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr[-2000:]

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(train_cmd(killed, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=ROOT)  # fmt: skip
    last = killed / "checkpoints" / "last.ckpt"
    # The kill waits on the run's files, not on the clock: it comes once an epoch is checkpointed, wherever the
    # run then is (the next test kills it at one chosen point).
    try:
        wait_for(last, proc, timeout=RUN_TIMEOUT)
    except BaseException:
        proc.kill()
        raise
    os.kill(proc.pid, signal.SIGKILL)  # a real crash: no handler runs
    proc.wait()
    assert not (killed / "results.json").exists()
    step_at_kill = load_checkpoint(last)["global_step"]
    assert 0 < step_at_kill < 96
    csv_at_kill = (killed / "logs" / "metrics.csv").read_text()

    seconds_at_kill = load_checkpoint(last)["callbacks"]["Timer"]["time_elapsed"]["train"]
    assert seconds_at_kill > 0

    r = run_cmd([*train_cmd(killed, *args), "--resume"], timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert results(killed)["global_step"] == results(full)["global_step"] == 96
    # training time is summed over the two parts, not only the resumed one
    assert results(killed)["train_seconds"] > round(seconds_at_kill, 1)
    # The metrics history before the kill survives the resume, and rows logged after the checkpoint (and so
    # logged again by the resumed run) appear once: the same rows as the uninterrupted run's, the same values.
    rows_full, rows_killed = metrics(full), metrics(killed)
    assert [(r["epoch"], r["step"]) for r in rows_killed] == [(r["epoch"], r["step"]) for r in rows_full], (
        csv_at_kill, (killed / "logs" / "metrics.csv").read_text()[:2000], r.stderr[-3000:])  # fmt: skip
    assert any(int(r["step"]) < step_at_kill for r in rows_killed)
    for a, b in zip(rows_full, rows_killed):
        assert a.keys() == b.keys()
        for k in a:
            if a[k] and not k.startswith("test/"):
                assert float(b[k]) == pytest.approx(float(a[k]), abs=METRIC_ATOL), (a["step"], k)
    # RNG states travel in the checkpoint, so the resumed run retraces the uninterrupted one.
    _, m_full = model_from_checkpoint(full / "checkpoints" / "last.ckpt")
    _, m_killed = model_from_checkpoint(killed / "checkpoints" / "last.ckpt")
    for (name, a), b in zip(m_full.state_dict().items(), m_killed.state_dict().values()):
        torch.testing.assert_close(a, b, **WEIGHTS, msg=name)


def assert_same_history(full: Path, resumed: Path) -> None:
    """The same rows, each metric logged at the same (epoch, step) rows, every value within METRIC_ATOL."""
    rows_full, rows_resumed = metrics(full), metrics(resumed)
    assert rows_resumed[0].keys() == rows_full[0].keys()  # the same columns
    assert [(r["epoch"], r["step"]) for r in rows_resumed] == [(r["epoch"], r["step"]) for r in rows_full]
    for name in rows_full[0]:
        logged = [(r["epoch"], r["step"]) for r in rows_full if r[name]]
        assert [(r["epoch"], r["step"]) for r in rows_resumed if r[name]] == logged, name
    for a, b in zip(rows_full, rows_resumed):
        for k in a:
            if a[k] and not k.startswith("test/"):
                assert float(b[k]) == pytest.approx(float(a[k]), abs=METRIC_ATOL), (a["epoch"], a["step"], k)


# Runs train.py and kills it (SIGKILL: no handler runs) at the moment Lightning is about to log the training
# summary row of epoch argv[1], that is after that epoch's last.ckpt is written and before the row reaches the file.
KILL_AT_EPOCH_SUMMARY = """
import os, signal, sys
from vitpos import training
from vitpos.compat.lightning import KeepHistoryWriter

log_metrics = KeepHistoryWriter.log_metrics


def dies_at_the_summary(self, metrics, step=None):
    if "train/loss_epoch" in metrics and metrics.get("epoch") == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
    log_metrics(self, metrics, step)


KeepHistoryWriter.log_metrics = dies_at_the_summary
sys.exit(training.main(sys.argv[2:]))
"""


@pytest.mark.cli
def test_sigkill_between_the_checkpoint_and_the_epoch_summary_keeps_the_summary(tmp_path):
    args = ["--epochs", "2", "--train-size", "64", "--batch-size", "16"]  # 4 steps an epoch
    full, killed = tmp_path / "full", tmp_path / "killed"
    r = run_cmd(train_cmd(full, *args))
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cmd([sys.executable, "-c", KILL_AT_EPOCH_SUMMARY, "0", *train_cmd(killed, *args)[2:]])
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    # killed in the gap: epoch 0 is checkpointed, its summary row is not in the file
    assert load_checkpoint(killed / "checkpoints" / "last.ckpt")["global_step"] == 4
    assert not any(row.get("train/loss_epoch") for row in metrics(killed))
    r = run_cmd([*train_cmd(killed, *args), "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_history(full, killed)


# -- the training loader resumes inside an epoch ------------------------------------------------------------------
def resumable_loader(state=None, workers: int = 0):
    from vitpos.data.resumable import EpochSeedSampler, ResumableLoader

    ds = list(range(40))
    loader = ResumableLoader(ds, sampler=EpochSeedSampler(ds), batch_size=4, drop_last=True, num_workers=workers)
    if state is not None:
        loader.load_state_dict(state)
    return loader


def test_the_training_loader_draws_what_a_shuffling_dataloader_draws():
    from torch.utils.data import DataLoader

    torch.manual_seed(3)
    plain = DataLoader(list(range(40)), batch_size=4, shuffle=True, drop_last=True)
    expected = [[b.tolist() for b in plain] for _ in range(2)], torch.get_rng_state()
    torch.manual_seed(3)
    loader = resumable_loader()
    got = [[b.tolist() for b in loader] for _ in range(2)], torch.get_rng_state()
    assert got[0] == expected[0] and torch.equal(got[1], expected[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_resumed_mid_epoch_serves_the_rest_of_that_epoch_and_leaves_the_rng_alone(workers):
    torch.manual_seed(3)
    loader = resumable_loader(workers=workers)
    epoch0 = iter(loader)
    first = [next(epoch0).tolist() for _ in range(3)]
    state, rng = loader.state_dict(), torch.get_rng_state()  # what a checkpoint after 3 batches holds
    rest = [b.tolist() for b in epoch0]
    epoch1 = [b.tolist() for b in loader]

    torch.set_rng_state(rng)  # as the resumed run restores it
    resumed = resumable_loader(state, workers=workers)
    batches = iter(resumed)
    assert torch.equal(torch.get_rng_state(), rng)  # building the resumed iterator draws nothing
    assert [b.tolist() for b in batches] == rest and len(first) + len(rest) == len(resumed)
    assert [b.tolist() for b in resumed] == epoch1  # and the next epoch is the uninterrupted run's


def test_a_rank_resumed_mid_epoch_serves_the_rest_of_its_part_of_a_later_epoch():
    """Under DDP: Lightning sets the epoch on the sampler after it built the resumed iterator (during the optimizer
    setup); the rank still serves the rest of that epoch's part, not of epoch 0's."""
    from vitpos.data.resumable import ResumableLoader, StatefulDistributedSampler

    def loader():
        ds = list(range(40))
        sampler = StatefulDistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=7)
        return ResumableLoader(ds, sampler=sampler, batch_size=4, drop_last=True)

    running = loader()
    running.sampler.set_epoch(1)
    batches = iter(running)
    [next(batches) for _ in range(2)]
    state, rest = running.state_dict(), [b.tolist() for b in batches]
    resumed = loader()
    resumed.load_state_dict(state)
    batches = iter(resumed)
    resumed.sampler.set_epoch(1)
    assert [b.tolist() for b in batches] == rest and len(rest) == 3


def test_a_training_loader_state_is_kept_only_inside_an_epoch(tmp_path):
    """The data module's checkpoint entry: the loader's state inside an epoch, nothing at an epoch's end (the next
    epoch starts afresh, as in the uninterrupted run)."""
    import lightning as L

    from vitpos.config import DataConfig
    from vitpos.data import build_datamodule

    kept = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            kept.append(bool(trainer.datamodule.state_dict()))

        def on_train_epoch_end(self, trainer, *args):
            kept.append(bool(trainer.datamodule.state_dict()))

    dm = build_datamodule(DataConfig(train_size=32, val_size=8, test_size=8, batch_size=8), img_size=32)
    lit = LitViT(_tiny_config().to_dict())
    trainer = L.Trainer(max_epochs=1, callbacks=[Watch()], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(lit, datamodule=dm)
    assert kept == [True, True, True, False, False]  # after batches 1-3 of 4; after the 4th; at the epoch's end


def _tiny_config():
    from vitpos.config import Config

    cfg = Config()
    cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads, cfg.model.num_classes = 32, 1, 2, 8
    return cfg


# Runs train.py as a file (Lightning's DDP launcher restarts the script for the other ranks) and kills the whole run
# (SIGKILL to its process group: every rank, no handler runs) when rank 0 is about to log the step row argv[1], a few
# steps after a mid-epoch last.ckpt (--ckpt-every-n-steps): rows after the checkpoint are in the file, the epoch's
# partial sums exist only in memory.
KILL_AT_STEP_ROW = """
import os, signal, sys
from vitpos import training
from vitpos.compat.lightning import KeepHistoryWriter

log_metrics = KeepHistoryWriter.log_metrics


def dies_at_the_row(self, metrics, step=None):
    if step == int(sys.argv[1]) and "train/loss_step" in metrics:
        os.killpg(0, signal.SIGKILL)
    log_metrics(self, metrics, step)


KeepHistoryWriter.log_metrics = dies_at_the_row
sys.exit(training.main(sys.argv[2:]))
"""


def kill_at_step_row(step: int, out: Path, *args: str) -> None:
    """Train into ``out`` under KILL_AT_STEP_ROW, in a session of its own: the kill takes every rank of the run and
    nothing else."""
    script = out.with_name("kill_at_step_row.py")
    script.write_text(KILL_AT_STEP_ROW)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(script), str(step), *train_cmd(out, *args)[2:]], capture_output=True,
                       text=True, timeout=RUN_TIMEOUT, env=env, cwd=ROOT, start_new_session=True)  # fmt: skip
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]


@pytest.mark.cli
@TWO_RUNS
@pytest.mark.parametrize("devices, extra", [(1, []), (1, ["--ema", "0.9"]),
                                            pytest.param(2, ["--strategy", "ddp"], marks=pytest.mark.ddp)],
                         ids=["one-process", "ema", "ddp"])  # fmt: skip
def test_sigkill_after_a_mid_epoch_checkpoint_keeps_the_epoch_summary(tmp_path, devices, extra):
    # 8 steps an epoch (per rank: 128 images, 16 per device on each of `devices` ranks); last.ckpt every 3 steps
    args = ["--epochs", "2", "--train-size", str(128 * devices), "--batch-size", "16", "--ckpt-every-n-steps", "3",
            "--log-every-n-steps", "1", "--devices", str(devices), *extra]  # fmt: skip
    full, killed = tmp_path / "full", tmp_path / "killed"
    r = run_cmd(train_cmd(full, *args), timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr[-2000:]
    kill_at_step_row(4, killed, *args)
    # killed in epoch 0, 3 steps into it by the checkpoint, with the row of step 3 (logged after it) in the file
    assert load_checkpoint(killed / "checkpoints" / "last.ckpt")["global_step"] == 3
    assert {int(row["step"]) for row in metrics(killed) if row.get("train/loss_step")} == {0, 1, 2, 3}
    assert not any(row.get("train/loss_epoch") for row in metrics(killed))
    r = run_cmd([*train_cmd(killed, *args), "--resume"], timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert results(killed)["global_step"] == results(full)["global_step"] == 16
    assert_same_history(full, killed)  # epoch 0's summary included: over all 8 steps, not the 5 after the resume


@pytest.mark.cli
def test_a_mid_epoch_checkpoint_without_the_epoch_entries_resumes_as_before(tmp_path):
    """A checkpoint written before the loader's position and the epoch's aggregates were kept: the resume trains to
    the end, that epoch's data starting over and its summary row over the steps after the resume."""
    from vitpos.compat.lightning import PartialEpoch

    args = ["--epochs", "2", "--train-size", "128", "--batch-size", "16", "--ckpt-every-n-steps", "3",
            "--log-every-n-steps", "1"]  # fmt: skip
    out = tmp_path / "run"
    kill_at_step_row(4, out, *args)
    last = out / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    positions = [k for k, v in ckpt.items() if isinstance(v, dict) and "train_loader" in v]  # the data module's
    assert len(positions) == 1 and PartialEpoch.KEY in ckpt
    for key in [*positions, PartialEpoch.KEY]:
        del ckpt[key]
    del ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]  # Lightning's copy of the loader's position
    torch.save(ckpt, last)
    r = run_cmd([*train_cmd(out, *args), "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert results(out)["global_step"] == 16
    summaries = [(row["epoch"], row["step"]) for row in metrics(out) if row["train/loss_epoch"]]
    assert summaries == [("0", "7"), ("1", "15")]


def test_the_epoch_summary_is_written_back_once(tmp_path):
    from vitpos.compat.lightning import KeepHistoryWriter

    header = "epoch,lr-AdamW,step,train/loss_epoch,train/loss_step,val/top1"
    (tmp_path / "metrics.csv").write_text(f"{header}\n0,0.001,3,,2.5,\n0,,3,,,0.25\n")  # killed before the summary
    summary = {"epoch": 0, "step": 3, "metrics": {"train/loss_epoch": 2.25}}
    KeepHistoryWriter(str(tmp_path), resume_step=4, epoch_summary=summary)
    restored = (tmp_path / "metrics.csv").read_text().splitlines()
    assert restored == [header, "0,0.001,3,,2.5,", "0,,3,,,0.25", "0,,3,2.25,,"]
    KeepHistoryWriter(str(tmp_path), resume_step=4, epoch_summary=summary)  # killed again and resumed again
    assert (tmp_path / "metrics.csv").read_text().splitlines() == restored


def test_a_new_metric_name_rewrites_the_history_whole_or_not_at_all(tmp_path, monkeypatch):
    """A new metric name makes the CSV writer rewrite metrics.csv under a wider header; a kill midway (here an
    error after the header is written) leaves the old file, where Lightning's in-place rewrite left it empty."""
    from vitpos.compat.lightning import KeepHistoryWriter

    writer = KeepHistoryWriter(str(tmp_path), resume_step=None)
    writer.log_metrics({"train/loss": 1.0}, step=0)
    writer.save()
    before = (tmp_path / "metrics.csv").read_text()

    def dies(self, rows):
        raise KeyboardInterrupt("killed midway")

    monkeypatch.setattr(csv.DictWriter, "writerows", dies)
    writer.log_metrics({"val/top1": 0.5}, step=1)
    with pytest.raises(KeyboardInterrupt):
        writer.save()
    assert (tmp_path / "metrics.csv").read_text() == before


def test_a_resume_drops_a_row_torn_by_the_kill(tmp_path):
    from vitpos.compat.lightning import KeepHistoryWriter

    (tmp_path / "metrics.csv").write_text("epoch,step,train/loss\n0,9,2.5\n0,19,2.25\n0,29,2.1")  # killed mid-append
    KeepHistoryWriter(str(tmp_path), resume_step=32)
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["epoch,step,train/loss", "0,9,2.5", "0,19,2.25"]


def test_ckpt_every_n_steps_writes_last_mid_epoch(tmp_path):
    out = tmp_path / "run"
    assert main(["--pos", "none", "--out", str(out), *TINY, "--epochs", "1", "--train-size", "256",
                 "--batch-size", "32", "--ckpt-every-n-steps", "3"]) == 0  # fmt: skip
    assert load_checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 8


# -- distributed on the CPU --------------------------------------------------------------------------------------


# train.py with each rank's training loss of every step written to LOSS_LOG.<rank>
LOSS_LOGGING_TRAIN = """
import os, sys
from vitpos.lit import LitViT
from vitpos.training import main

real_step = LitViT.training_step

def logged(self, batch, batch_idx):
    loss = real_step(self, batch, batch_idx)
    with open(os.environ["LOSS_LOG"] + f".{self.global_rank}", "a") as f:
        f.write(f"{loss.item()!r}\\n")
    return loss

LitViT.training_step = logged
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.cli
@pytest.mark.ddp
def test_ddp_two_cpu_processes_trains_and_its_checkpoint_loads(tmp_path):
    out, script, log = tmp_path / "ddp", tmp_path / "train_logging.py", tmp_path / "loss"
    script.write_text(LOSS_LOGGING_TRAIN)
    cmd = train_cmd(out, "--epochs", "1", "--train-size", "256", "--batch-size", "16", "--devices", "2",
                    "--strategy", "ddp")  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "LOSS_LOG": str(log), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(script), *cmd[2:]], capture_output=True, text=True, timeout=300, env=env,
                       cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    # the logged epoch loss is the mean over both ranks' steps, not rank 0's alone
    losses = [[float(v) for v in log.with_name(f"loss.{k}").read_text().split()] for k in (0, 1)]
    assert len(losses[0]) == len(losses[1]) == 8 and losses[0] != losses[1]
    (logged,) = [float(row["train/loss_epoch"]) for row in metrics(out) if row.get("train/loss_epoch")]
    assert logged == pytest.approx(sum(losses[0] + losses[1]) / 16, rel=1e-5)
    assert logged != pytest.approx(sum(losses[0]) / 8, rel=1e-5)
    assert "global batch = 16 per device x 2 devices x 1 nodes = 32" in r.stdout
    for noise in ("Tip:", "GPU available", "LeafSpec", "smaller than the logging interval", "Restoring states",
                  "Initializing distributed", "sync_dist"):  # fmt: skip
        assert noise not in r.stdout + r.stderr, noise  # 8 steps < log_every_n_steps: that warning was due here
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
    from vitpos.rundir import resolve_out

    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(b"the user's work")
    cfg = Config()
    cfg.trainer.out = str(out)
    with pytest.raises(ConfigError, match="already holds a run"):
        resolve_out(cfg)
    cfg.trainer.overwrite = True
    assert resolve_out(cfg) == out
    release_lock(out)
    assert [p.name for p in out.iterdir()] == [LOCK]  # the earlier run's files are gone from --out ...
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert (aside / "checkpoints" / "last.ckpt").read_bytes() == b"the user's work"  # ... to here, intact
    assert str(aside) in capsys.readouterr().err


# -- Ctrl-C -------------------------------------------------------------------------------------------------------


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not path.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before the signal; make it longer"


@pytest.mark.cli
def test_ctrl_c_exits_130_keeps_the_checkpoint_and_the_resume_sums_training_time(tmp_path):
    out = tmp_path / "run"
    args = ["--epochs", "1", "--train-size", "2048", "--batch-size", "16", "--ckpt-every-n-steps", "8"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(train_cmd(out, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)  # fmt: skip
    last = out / "checkpoints" / "last.ckpt"
    wait_for(last, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"train.py: interrupted; last checkpoint kept ({last}); resume with: python train.py --resume --out {out}"
    )
    at_interrupt = load_checkpoint(last)
    assert 0 < at_interrupt["global_step"] < 128
    r = run_cmd([sys.executable, str(ROOT / "train.py"), "--resume", "--out", str(out)])  # the command it printed
    assert r.returncode == 0, r.stderr[-2000:]
    assert results(out)["global_step"] == 128
    assert results(out)["train_seconds"] > round(at_interrupt["callbacks"]["Timer"]["time_elapsed"]["train"], 1)


@pytest.mark.cli
def test_ctrl_c_before_the_first_checkpoint_leaves_nothing_that_blocks_a_rerun(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    cmd = train_cmd(out, "--epochs", "1", "--train-size", "4096", "--batch-size", "16")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    wait_for(out / "config.yaml", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "train.py: interrupted before the first checkpoint; nothing was kept"
    assert not out.exists()  # the start cleaned up after itself
    assert main(["--pos", "none", "--out", str(out), *TINY, "--epochs", "1", "--train-size", "32",
                 "--batch-size", "16"]) == 0  # fmt: skip


def test_the_run_clock_adds_the_time_carried_in_the_checkpoint(tmp_path):
    """The Trainer's clock (Lightning's Timer) starts from the training time its checkpoint carries."""
    from lightning.pytorch.callbacks import Timer

    from vitpos.config import Config
    from vitpos.training import build_trainer

    cfg = Config()
    cfg.trainer.resume = True
    (clock,) = [c for c in build_trainer(cfg, tmp_path).callbacks if isinstance(c, Timer)]
    clock.load_state_dict({"time_elapsed": {"train": 100.0}})
    clock.on_train_start(None, None)
    time.sleep(0.05)
    clock.on_train_end(None, None)
    assert 100.05 <= clock.state_dict()["time_elapsed"]["train"] < 101


# -- unfinished starts (killed before a checkpoint: no handler ran) -----------------------------------------------


def leave_an_unfinished_start(out: Path, pos: str) -> None:
    """What a start killed before its first checkpoint leaves: config, logs, an empty checkpoints folder."""
    from vitpos.config import Config

    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = pos, 32, 1, 2
    cfg.data.train_size, cfg.data.val_size, cfg.data.test_size, cfg.data.batch_size = 32, 32, 32, 16
    cfg.optim.epochs, cfg.trainer.out = 1, str(out)
    (out / "checkpoints").mkdir(parents=True)
    (out / "logs").mkdir()
    (out / "logs" / "metrics.csv").write_text("epoch,step\n")
    (out / "tb").mkdir()
    cfg.save_yaml(out / "config.yaml", header=RUN_CONFIG_HEADER)  # as train.py writes it


def test_an_unfinished_start_does_not_block_a_new_start(tmp_path, capsys):
    out = tmp_path / "run"
    leave_an_unfinished_start(out, "relbias")
    assert main(["--pos", "none", "--out", str(out), *TINY, "--epochs", "1", "--train-size", "32",
                 "--batch-size", "16"]) == 0  # fmt: skip
    assert "cleared an unfinished start" in capsys.readouterr().err
    assert load_checkpoint(out / "checkpoints" / "last.ckpt")["hyper_parameters"]["config"]["model"]["pos"] == "none"


def test_resume_of_an_unfinished_start_starts_it_afresh_with_its_own_config(tmp_path, capsys):
    out = tmp_path / "run"
    leave_an_unfinished_start(out, "relbias")
    assert main(["--resume", "--out", str(out)]) == 0
    assert "starting it afresh" in capsys.readouterr().err
    assert results(out)["pos"] == "relbias" and results(out)["global_step"] == 2


def test_a_users_own_config_yaml_is_never_taken_for_an_unfinished_start(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("model:\n  pos: none\n")  # the user's, e.g. to pass as --config
    assert main(["--config", str(out / "config.yaml"), "--out", str(out), *TINY]) == 2
    assert "already holds a run or other files" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["config.yaml"] and "pos: none" in (out / "config.yaml").read_text()
    assert main(["--resume", "--out", str(out)]) == 2  # nor resumed as one; and no lock file is left behind
    assert [p.name for p in out.iterdir()] == ["config.yaml"]
    assert main(["--resume", "--out", str(tmp_path / "typo")]) == 2 and not (tmp_path / "typo").exists()


def test_a_folder_with_other_files_is_never_cleared(tmp_path, capsys):
    out = tmp_path / "run"
    leave_an_unfinished_start(out, "relbias")
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    assert main(["--pos", "none", "--out", str(out), *TINY]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert snapshot(out) == before


# -- a refused resume changes nothing ------------------------------------------------------------------------------


def test_a_refused_resume_changes_nothing_and_names_the_fields(good_ckpt, capsys):
    out = good_ckpt.parent.parent
    before = snapshot(out)
    assert main(["--resume", "--out", str(out), "--pos", "learned", "--lr", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "model.pos ('sincos2d' -> 'learned')" in err and "optim.lr (0.001 -> 0.5)" in err
    assert snapshot(out) == before  # metrics, config.yaml, checkpoints: byte for byte, not even touched


def test_resume_may_change_where_it_runs_but_not_what_it_trains(good_ckpt, capsys):
    out = good_ckpt.parent.parent
    before = snapshot(out)
    assert main(["--resume", "--out", str(out), "--num-workers", "0", "--log-every-n-steps", "5",
                 "--devices", "2"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "trainer.devices (1 -> 2)" in err and "num_workers" not in err and "log_every" not in err
    assert snapshot(out) == before


def test_a_resume_reads_its_checkpoint_once(tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["--pos", "none", "--out", str(out), *TINY, "--epochs", "1", "--train-size", "32", "--batch-size", "16"]
    assert main(args) == 0
    last, reads, real_load = out / "checkpoints" / "last.ckpt", [], torch.load

    def counting(f, *a, **kw):
        reads.append(Path(f).resolve())
        return real_load(f, *a, **kw)

    monkeypatch.setattr(torch, "load", counting)
    assert main([*args, "--resume"]) == 0
    assert reads.count(last.resolve()) == 1  # for its config, its step and Lightning's restore alike


# -- two runs on one folder ----------------------------------------------------------------------------------------


@pytest.mark.cli
def test_the_lock_is_held_for_the_run_and_released_when_it_dies(tmp_path, capsys):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(train_cmd(out, "--epochs", "1", "--train-size", "4096", "--batch-size", "16"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)  # fmt: skip
    try:
        wait_for(out / "config.yaml", proc)
        before = snapshot(out)
        assert main(["--pos", "rope2d", "--out", str(out), *TINY, "--overwrite"]) == 2
        err = capsys.readouterr().err.strip()
        assert f"is in use by another training run (pid {proc.pid})" in err and len(err.splitlines()) == 1
        assert (out / "config.yaml").read_bytes() == before["config.yaml"][0]  # the running run's, untouched
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    RunLock(out).release()  # the kernel dropped the dead run's lock: no stale lock blocks anyone


@pytest.mark.cli
def test_two_runs_started_at_once_on_one_folder(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    args = ["--epochs", "1", "--train-size", "256", "--batch-size", "16"]
    cmds = {pos: [*train_cmd(out, *args)[:3], pos, *train_cmd(out, *args)[4:]] for pos in ("learned", "sincos2d")}
    procs = {pos: subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                   cwd=ROOT) for pos, cmd in cmds.items()}  # fmt: skip
    done = {pos: (p.wait(timeout=240), p.stderr.read()) for pos, p in procs.items()}
    (winner,) = [pos for pos, (code, _) in done.items() if code == 0]
    (loser,) = [pos for pos, (code, _) in done.items() if code == 2]
    err = done[loser][1].strip()
    assert len(err.splitlines()) == 1 and ("in use by another training run" in err or "already holds a run" in err)
    # the folder holds one run: the winner's config beside the winner's checkpoints
    assert results(out)["pos"] == winner
    assert yaml_pos(out / "config.yaml") == winner
    for ckpt in (out / "checkpoints").glob("*.ckpt"):
        assert load_checkpoint(ckpt)["hyper_parameters"]["config"]["model"]["pos"] == winner


def yaml_pos(path: Path) -> str:
    from vitpos.config import Config

    return Config.from_yaml(path).model.pos


# -- zero steps, permissions ---------------------------------------------------------------------------------------


@pytest.mark.cli
@pytest.mark.ddp
def test_a_run_that_trains_zero_steps_is_an_error_and_leaves_nothing(tmp_path):
    out = tmp_path / "run"
    # 16 images on 2 ranks: 8 per rank, fewer than one batch of 16, so no rank gets a single training batch
    r = run_cmd(train_cmd(out, "--epochs", "1", "--train-size", "16", "--batch-size", "16", "--devices", "2",
                          "--strategy", "ddp"))  # fmt: skip
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert errors == [
        "train.py: error: trained zero steps: the training set gives no full batch of 16 images per device on "
        "2 device(s); lower --batch-size, use fewer devices or more training images"
    ]
    assert "Traceback" not in r.stderr
    assert not out.exists()  # no results.json, no untrained checkpoint to mistake for a model


def test_checkpoints_have_the_permissions_of_every_other_file(good_ckpt):
    out = good_ckpt.parent.parent
    modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()}
    assert modes["config.yaml"] == modes["results.json"] == modes["logs/metrics.csv"]
    for name, mode in modes.items():
        assert mode == modes["config.yaml"], name  # group and others may read the checkpoints as they read the rest
    assert modes["config.yaml"] & 0o044  # readable by colleagues under the usual umask (022)


def test_quiet_logs_keep_real_warnings():
    import warnings

    from vitpos.cli import quiet_logs

    quiet_logs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_logs()  # its filters go first, as they do in train.py
        warnings.warn("The number of training batches (4) is smaller than the logging interval", stacklevel=1)
        warnings.warn("a real problem", stacklevel=1)
    assert [str(w.message) for w in caught] == ["a real problem"]
