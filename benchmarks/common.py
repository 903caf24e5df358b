"""What the benchmarks share: running vitpos's own commands, reusing finished runs and sweeps, writing records.

Benchmarks measure and write JSON; ``python -m benchmarks.pages`` turns that JSON into docs/*.md and plots.
Nothing in vitpos/ imports this folder.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.rules import option_leaves, pos_rule_of

if TYPE_CHECKING:
    from vitpos.config import Config

ROOT = Path(__file__).resolve().parents[1]
# The runs each study trains with every seed: five schemes with the patch stem, and `none` with a conv stem.
MAIN_RUNS = ["learned:patch", "sincos2d:patch", "rope2d:patch", "relbias:patch", "none:patch", "none:conv"]


def run(cmd: list[str]) -> None:
    """A vitpos command in this checkout: its package first on the path, no run folder inherited from the caller."""
    print("+", shlex.join(cmd), flush=True)
    env = {k: v for k, v in os.environ.items() if k != "VITPOS_RUN_OUT"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def machine() -> dict[str, str | int]:
    """Where and with what code a measurement was made: stored beside it, printed under every table. ``commit`` is
    the code this process imported, so a speed table names the version it timed as a study's runs do."""
    import torch

    from vitpos.training import cpu_name

    gpu = {}
    if torch.cuda.is_available():
        smi = [
            "nvidia-smi",
            "--query-gpu=driver_version",
            "--format=csv,noheader",
            "-i",
            str(torch.cuda.current_device()),
        ]
        try:
            driver = subprocess.run(smi, capture_output=True, text=True, timeout=30).stdout.strip() or "unknown"
        except (OSError, subprocess.TimeoutExpired):
            driver = "unknown"
        gpu = {"gpu": torch.cuda.get_device_name(), "driver": driver, "cuda": torch.version.cuda}
    return {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "cores": len(os.sched_getaffinity(0)), **gpu,
            "torch": torch.__version__, "commit": LOADED_VERSION}  # fmt: skip


def dumps(record: dict) -> str:
    """A record as JSON with one top-level key per line and one list entry per line: compact (a study holds thousands
    of cells) yet a rerun's diff still shows which entries changed."""

    def value(v: object) -> str:
        if isinstance(v, list) and v:
            return "[\n" + ",\n".join(f"  {json.dumps(e)}" for e in v) + "\n ]"
        return json.dumps(v)

    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in record.items()) + "\n}\n"


def write_record(path: str | Path, script: str, argv: list[str], **data) -> None:
    """One benchmark's JSON: the command that made it, the machine and its load average, then the measurements.
    Written whole or not at all (a sibling file, then a rename): a study stopped mid-write keeps its last record."""
    load = [round(v, 2) for v in os.getloadavg()]
    module = f"benchmarks.{Path(script).stem}"
    record = {"command": shlex.join(["python", "-m", module, *argv]), "machine": machine(),
              "load_average": load, **data}  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(dumps(record))
    os.replace(tmp, path)
    print(f"wrote {path}", flush=True)


def repeat(fn: Callable[[], object], n: int, a: argparse.Namespace) -> Callable[[], None]:
    """fn called n times, then ``a.device`` synchronised (CUDA runs asynchronously): what one timed round runs."""

    def run() -> None:
        for _ in range(n):
            fn()
        if a.device == "cuda":
            import torch

            torch.cuda.synchronize()

    return run


def round_robin(fns: dict[str, Callable[[], object]], rounds: int, clock=time.perf_counter) -> dict[str, list[float]]:
    """Seconds (by ``clock``) of each call per round, run A, B, C, then C, B, A, so drift and load hit all alike."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for k in list(fns) if r % 2 == 0 else list(fns)[::-1]:
            t0 = clock()
            fns[k]()
            out[k].append(clock() - t0)
    return out


def cores_per_job(p: argparse.ArgumentParser, jobs: int) -> int:
    """The threads each of ``jobs`` trainings at once gets (the cores shared out), or the parser's one-line error."""
    if jobs < 1:
        p.error(f"--jobs must be at least 1, got {jobs}")
    return max(1, len(os.sched_getaffinity(0)) // jobs)


def code_version() -> str:
    """The commit of this checkout, with ``+dirty`` where tracked files that change what a run computes (vitpos/,
    train.py, configs/) differ from it: what every record names as ``commit``."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--", "vitpos", "train.py",
                            "configs"], capture_output=True, text=True).stdout.strip()  # fmt: skip
    return (head or "unknown") + ("+dirty" if dirty else "")


# The code this process imported, which is what its in-process measurements ran: a commit made while a long study
# runs must not relabel the records it goes on to write (a training runs in a subprocess and is labelled apart).
LOADED_VERSION = code_version()


def provenance(checkpoint: str | Path | None = None, hardware: str | None = None) -> dict[str, str]:
    """What a record names of where and how it was made: ``hardware`` (devices x processor, as a run's
    results.json states it), ``device`` (cpu or cuda), ``commit`` (the code this process imported), ``torch``,
    ``threads`` (this process's intra-op threads) and, for a record of a checkpoint, its ``ckpt_sha256``."""
    import torch

    from vitpos.training import cpu_name

    cuda = torch.cuda.is_available()
    out = {"hardware": hardware or f"1 x {torch.cuda.get_device_name() if cuda else cpu_name()}",
           "device": "cuda" if cuda else "cpu", "commit": LOADED_VERSION, "torch": torch.__version__,
           "threads": torch.get_num_threads()}  # fmt: skip
    if checkpoint is not None:
        out["ckpt_sha256"] = fingerprint(checkpoint)
    return out


def train_run(run_dir: Path, flags: list[str], retrain: bool = False) -> dict:
    """``python train.py FLAGS --out RUN_DIR`` unless RUN_DIR already holds a finished run; what a page uses of it,
    with the run's provenance (kept in RUN_DIR/provenance.json, written when the run is trained)."""
    made = run_dir / "provenance.json"
    if retrain or not (run_dir / "results.json").is_file():
        commit = code_version()  # before training: the code the run is trained with
        run([sys.executable, "train.py", *flags, "--out", str(run_dir), *(["--overwrite"] if run_dir.exists() else [])])
        res = json.loads((run_dir / "results.json").read_text())
        stamp = provenance(run_dir / "checkpoints" / "last.ckpt", res.get("hardware")) | {"commit": commit}
        stamp |= {"threads": res["threads"]} if "threads" in res else {}  # the training process's, not this one's
        made.write_text(json.dumps(stamp, indent=1) + "\n")
    else:
        print(f"reusing the finished run in {run_dir}", flush=True)
        res = json.loads((run_dir / "results.json").read_text())
    stamp = json.loads(made.read_text()) if made.is_file() else {}  # a run trained before records were stamped
    return {**run_results(res), **stamp,
            "run": str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir)}  # fmt: skip


def run_results(res: dict) -> dict:
    """What a page uses of a finished run's results.json (train.py's): its top-1 on each split, seconds and steps."""
    return {"best_val_top1": res["best_val_top1"], "test_top1": res["test"]["test/top1"],
            "train_top1": res.get("last_train", {}).get("train/top1"),
            "train_seconds": res["train_seconds"], "steps": res["global_step"]}  # fmt: skip


def study_budget(cfg: Config, **more: object) -> dict:
    """The budget a study's page states: the model's size, the epochs, the batch and the learning rate, and ``more``."""
    m, o = cfg.model, cfg.optim
    return {"embed_dim": m.embed_dim, "depth": m.depth, "num_heads": m.num_heads, "patch_size": m.patch_size,
            "img_size": m.img_size, "epochs": o.epochs, "batch_size": cfg.data.batch_size, "lr": o.lr,
            **more}  # fmt: skip


def run_specs(p: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, str]]:
    """POS:STEM arguments as (pos, stem), or the parser's one-line error."""
    from vitpos import POS_SCHEMES

    pairs = [tuple(spec.partition(":")[::2]) for spec in specs]
    for spec, (pos, stem) in zip(specs, pairs, strict=True):
        if pos not in POS_SCHEMES or stem not in ("patch", "conv"):
            p.error(f"bad run '{spec}': POS:STEM with POS in {', '.join(POS_SCHEMES)}, STEM patch or conv")
    return pairs


@functools.cache
def has_pos_params(spec: str) -> bool:
    """Whether a scheme (POS or POS:STEM) has parameters of its own: only then does the position rule change its
    training."""
    from vitpos import create_model

    model = create_model(spec.partition(":")[0], embed_dim=16, depth=1, num_heads=4)
    return any(True for _ in model.pos.parameters())


def at_default_rule(run: dict, budget: dict) -> bool:
    """Whether a run of a benchmarks/results.py record trained with the default position rule its budget names, and
    with its scheme's default options."""
    return pos_rule_of(run) == pos_rule_of(budget, "default_") and not run.get("pos_kwargs")


def run_name(pos: str, stem: str, seed: int, rule: dict, opts: dict | None = None) -> str:
    """The run folder of a scheme with position parameters: lrS, then -wdW (a decay towards zero, the first
    measured) or -wdW-start, then -rampE, then each scheme option it sets (-localityL); the names of runs recorded
    before a field existed stay as they were."""
    decay = rule["pos_weight_decay"]
    pull = f"-wd{decay:g}" + ("" if rule["pos_decay_to"] == "zero" else f"-{rule['pos_decay_to']}") if decay else ""
    ramp = f"-ramp{rule['pos_lr_warmup_epochs']:g}" if rule["pos_lr_warmup_epochs"] else ""
    named = "".join(f"-{k}{v:g}" if isinstance(v, int | float) else f"-{k}{v}" for k, v in option_leaves(opts or {}))
    return f"{pos}-{stem}-lr{rule['pos_lr_scale']:g}{pull}{ramp}{named}-seed{seed}"


def aug_slug(aug: str | None) -> str:
    """A run folder's suffix for a position augmentation (PosAug text, canonical): -aug-shift0.1-rescale2; ''."""
    from vitpos.pos.base import PosAug

    if aug is None:
        return ""
    return "-aug-" + str(PosAug.parse(aug)).replace("=", "").replace(",", "-")


def study_run(
    out: Path, pos: str, stem: str, seed: int, rule: dict, opts: dict, params: bool, aug: str | None = None,
    resolutions: list[int] | None = None,
) -> tuple[Path, list[str]]:  # fmt: skip
    """A study's run: its folder under ``out`` and its ``train.py`` flags, the scheme and the seed, and for a scheme
    with position ``params`` the rule and its scheme options (those without train identically under every rule, so
    their folder names none); a position augmentation ``aug`` (PosAug text) and multi-resolution training
    (``resolutions``) are flags and suffixes of the folder."""
    from vitpos.pos.base import PosAug

    flags = ["--pos", pos, "--stem", stem, "--seed", str(seed)]
    if aug is not None:
        flags += ["--pos-aug", str(PosAug.parse(aug))]
    suffix = aug_slug(aug)
    if resolutions:
        flags += ["--train-resolutions", *map(str, resolutions)]
        suffix += "-mr" + "-".join(map(str, resolutions))
    if not params:
        return out / f"{pos}-{stem}{suffix}-seed{seed}", flags
    for k, v in rule.items():
        if v != "none":  # no decay: nothing to pull towards
            flags += [f"--{k.replace('_', '-')}", v if isinstance(v, str) else f"{v:g}"]
    for k, v in opts.items():  # JSON is YAML: --pos-kwarg relbias={"locality": 0} for a composition's part
        flags += ["--pos-kwarg", f"{k}={json.dumps(v)}"]
    name = run_name(pos, stem, seed, rule, opts)
    return out / (name.removesuffix(f"-seed{seed}") + f"{suffix}-seed{seed}"), flags


def earlier_record(path: str | Path) -> dict:
    """The JSON a study wrote before (empty if none): what it keeps of runs whose folders are gone."""
    return json.loads(Path(path).read_text()) if Path(path).is_file() else {}


def study_above(p: argparse.ArgumentParser, study_arg: str, sizes: list[str] | None,
                default: Callable[[dict, int], list[str]]) -> tuple[dict, int, str, list[str]]:  # fmt: skip
    """A study record a measurement reads (``--study``): the record, its training size, its path as the pages name it
    (relative to the repository where it lies inside it) and the sizes to test: ``sizes``, else ``default(record,
    training size)``, all above the training size; otherwise the parser's one-line error."""
    path = Path(study_arg)
    try:
        study = json.loads(path.read_text())
        train = int(study["budget"]["img_size"])
    except (OSError, ValueError, KeyError) as e:
        p.error(f"--study {study_arg}: not a study record ({e})")
    sizes = sizes or default(study, train)
    if not sizes or any(not s.isdigit() or int(s) <= train for s in sizes):
        p.error(f"--sizes: sizes above the training size ({train} px) are needed, got {sizes or 'none'}")
    named = str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    return study, train, named, sizes


def fingerprint(path: str | Path) -> str:
    """The SHA-256 of a file: what a sweep record keeps of the checkpoint it measured."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
