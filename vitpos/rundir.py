"""The run folder ``--out``: its lock, its lifecycle and the check of a resumed run's settings (plain Python).

* **One run per folder.** The training process holds a lock on ``OUT/.lock`` for the run's life; a second run on
  the same folder is refused in one line, naming the holder's pid.
* **Nothing is overwritten silently.** A folder that holds a run is continued (``--resume``), moved aside
  (``--overwrite``: ``OUT.old-<time>``) or refused. A start that never reached its first checkpoint (only the
  files a start writes, :data:`START_ARTEFACTS`) is cleared by the next start, and a folder with anything else in
  it is never cleared.
* **A resume trains what it trained.** :func:`config_changes` names every setting that differs from the saved run's
  and may not change (the config fields not marked ``resumable``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import sys
import time
from pathlib import Path

from .config import Config, walk
from .errors import ConfigError
from .outputs import make_dir, shell

OUT_ENV = "VITPOS_RUN_OUT"  # hands the chosen run folder to the processes Lightning's DDP launcher starts
LOCK = ".lock"  # held (lockf) by the training process for the run's life
# What a start writes before its first checkpoint: a folder holding only these (and no checkpoint)
# is an unfinished start, cleared by the next one.
START_ARTEFACTS = ("config.yaml", "logs", "tb", "checkpoints")
# The first line of the config.yaml train.py writes into a run folder: what tells its own file from a user's.
RUN_CONFIG_HEADER = "# vitpos run config, written by train.py (it reads back with --config)\n"


def env_rank() -> int:
    """This process's global rank as the launcher (torchrun, SLURM, Lightning) set it; 0 when alone."""
    # Not Lightning's rank_zero_only.rank: that prefers LOCAL_RANK to SLURM_PROCID, and this rank decides the
    # run folder before any Trainer exists to correct it.
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return int(os.environ.get("LOCAL_RANK", 0))  # Lightning's own launcher, one node


def last_checkpoint(out: str | Path) -> Path:
    return Path(out) / "checkpoints" / "last.ckpt"


class RunLock:
    """An exclusive lock on ``OUT/.lock`` for the life of a run: a second run on the same folder is refused.

    A POSIX record lock (lockf), not flock: a flock is shared with every process forked while it is held
    (data loader workers), which outlive a killed run for a while and would keep it locked. The kernel
    drops a record lock when its process ends, however it ends (SIGKILL included)."""

    held: dict[Path, RunLock] = {}

    def __init__(self, out: Path):
        self.path = out / LOCK
        self.created = not self.path.exists()  # a refused start removes a lock file it made (a user's folder)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise ConfigError(
                f"{out} is in use by another training run (pid {holder}); wait for it to end or choose another --out"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        RunLock.held[out] = self

    def release(self, remove: bool = False) -> None:
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        RunLock.held = {k: v for k, v in RunLock.held.items() if v is not self}


def release_lock(out: Path, remove: bool = False) -> None:
    lock = RunLock.held.get(out)
    if lock is not None:
        lock.release(remove)


def refuse(out: Path, existed: bool, message: str) -> ConfigError:
    """The error for a start refused in ``out``: whatever the refused start made there (its lock file, the folder
    itself) is removed first."""
    lock = RunLock.held.get(out)
    release_lock(out, remove=lock is not None and lock.created)
    if not existed and out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    return ConfigError(message)


def entries(out: Path) -> list[Path]:
    """What ``out`` holds, but the lock."""
    return [p for p in out.iterdir() if p.name != LOCK]


def has_checkpoint(out: Path) -> bool:
    ckpts = out / "checkpoints"
    return ckpts.is_dir() and any(p.suffix == ".ckpt" for p in ckpts.iterdir())


def unfinished_start(out: Path) -> bool:
    """``out`` holds only what a start writes before its first checkpoint (its config.yaml, which says that train.py
    wrote it: a user's own config.yaml is never taken for one), and no checkpoint."""
    config = out / "config.yaml"
    ours = config.is_file() and config.read_text(errors="replace").startswith(RUN_CONFIG_HEADER)
    return ours and all(p.name in START_ARTEFACTS for p in entries(out)) and not has_checkpoint(out)


def clear_start(out: Path) -> None:
    """Remove what a start wrote (config, logs, an empty checkpoints folder); nothing else is touched."""
    for name in START_ARTEFACTS:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def resolve_out(cfg: Config) -> Path:
    """Choose the run folder, take its lock, and make sure no earlier run is overwritten silently."""
    t = cfg.trainer
    if env_rank() > 0 and os.environ.get(OUT_ENV):  # a process the launcher started: same folder as rank 0
        return Path(os.environ[OUT_ENV])
    if t.out is None:
        if t.resume:
            raise ConfigError("--resume needs --out pointing at the run to continue")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        data = re.sub(r"[^\w.-]+", "_", cfg.data.name).strip("_")  # hf:PATH -> hf_PATH: one folder
        out = Path("runs") / f"{data}-{cfg.model.pos}-{cfg.model.stem}-{stamp}"
    else:
        out = Path(t.out)
    if env_rank() == 0 and not t.fast_dev_run:
        _claim(out, cfg)
    os.environ[OUT_ENV] = str(out)
    return out


def _claim(out: Path, cfg: Config) -> None:
    """Create and lock ``out``; clear an unfinished start, move an earlier run aside or refuse, as asked."""
    t = cfg.trainer
    existed = out.exists()
    make_dir(out)
    RunLock(out)
    last = last_checkpoint(out)
    if t.resume and not last.is_file():
        if not unfinished_start(out):
            raise refuse(out, existed, f"nothing to resume: {last} does not exist")
        clear_start(out)
        t.resume = False
        print(f"train.py: {out} holds a start that never reached a checkpoint; starting it afresh", file=sys.stderr)
    elif not t.resume and entries(out):
        if unfinished_start(out):
            clear_start(out)
            print(f"train.py: cleared an unfinished start (no checkpoint) in {out}", file=sys.stderr)
        elif not t.overwrite:
            raise refuse(
                out,
                existed,
                f"{out} already holds a run or other files; pass --resume to continue a run, --overwrite to move what "
                "it holds aside, or choose another --out",
            )
        else:
            aside = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
            aside.mkdir()
            for p in entries(out):
                p.rename(aside / p.name)
            print(f"moved the earlier run in {out} to {aside}", file=sys.stderr)


def close(out: Path) -> None:
    """Release the run's lock; a folder the run left empty is removed with it."""
    try:
        if out.is_dir():
            empty = not entries(out)
            release_lock(out, remove=empty)
            if empty and not any(out.iterdir()):
                out.rmdir()
    except FileNotFoundError:
        pass  # under DDP rank 0 may clear a run that trained nothing while another rank is here


def config_changes(saved: Config, requested: Config) -> list[str]:
    """'section.field (old -> new)' for every field that differs and may not change on resume."""
    changes = []
    for (name, a_section, f), (_, b_section, _) in zip(walk(saved), walk(requested), strict=True):
        a, b = getattr(a_section, f.name), getattr(b_section, f.name)
        if a != b and not f.metadata.get("resumable"):
            changes.append(f"{name}.{f.name} ({a!r} -> {b!r})")
    return changes


def interrupted_message(out: str | None) -> str:
    """What a Ctrl-C kept and how to go on."""
    last = last_checkpoint(out) if out else None
    if last is not None and last.is_file():
        return f"train.py: interrupted; {kept_message(out)}"
    return "train.py: interrupted before the first checkpoint; nothing was kept"


def kept_message(out: str | Path | None) -> str:
    """What a run that stopped early leaves in ``out``, and the command that continues it (as it can be pasted)."""
    last = last_checkpoint(out) if out else None
    if last is None or not last.is_file():
        return "nothing was kept"
    return f"last checkpoint kept ({shell(last)}); resume with: {shell('python', 'train.py', '--resume', '--out', out)}"
