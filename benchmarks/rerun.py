"""Does a recorded run come out the same when it is trained again? The check behind the summary's reruns.

    python -m benchmarks.rerun --runs learned:patch rope2d:patch --seeds 0 --json docs/rerun.json
    python -m benchmarks.rerun --study REV:docs/study.json --out runs/rules ...   # a record since replaced
    python -m benchmarks.pages

Each named run of a study's record (docs/study.json by default) is trained again, in a folder of its own, with the
``train.py`` flags the study gave it (its scheme, seed, position rule, augmentation and training sizes), by the code
of this checkout on this machine. The rerun is set beside the record: test and best validation top-1, the config
fields the two runs' config.yaml set differently (none: the same command), and the largest absolute difference over
every tensor of the two last checkpoints' weights (0: bit for bit the same).
On the same kind of machine the floating-point order is the same, so a rerun should agree exactly; where it does
not, the page shows by how much. ``--study REV:PATH`` reads the record as committed at REV: a study trained again at a
later commit into ``--out`` is set beside the record it replaced (its finished runs are reused, not trained again;
where the old checkpoints are gone, the weight and config columns say so). ``--out`` may be the record's own folder
only where each run there is such a later training: a checkpoint other than the one the record names.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from benchmarks.common import ROOT, fingerprint, has_pos_params, run_specs, study_run, train_run, write_record
from benchmarks.rules import pos_rule_of


def weight_difference(a: Path, b: Path) -> float:
    """The largest |a - b| over every floating-point tensor of two checkpoints' state dicts (inf where their keys or
    shapes differ): 0.0 means the two trainings ended on the same weights, bit for bit."""
    import torch

    from vitpos.checkpoint import load_checkpoint

    sa, sb = load_checkpoint(a)["state_dict"], load_checkpoint(b)["state_dict"]
    if sa.keys() != sb.keys() or any((sa[k].shape, sa[k].dtype) != (sb[k].shape, sb[k].dtype) for k in sa):
        return float("inf")
    if not all(torch.equal(sa[k], sb[k]) for k in sa if not sa[k].is_floating_point()):
        return float("inf")
    floats = [k for k in sa if sa[k].is_floating_point() and sa[k].numel()]
    return max(((sa[k].double() - sb[k].double()).abs().max().item() for k in floats), default=0.0)


def config_differences(a: Path, b: Path) -> list[str]:
    """The config fields two runs' config.yaml files set differently (``section.field``), each read as today's Config
    (a field added since a run was made takes its default), where each run went aside: none means the same command."""
    from vitpos.config import Config

    ca, cb = (Config.from_yaml(p).to_dict() for p in (a, b))
    fields = {(s, k) for c in (ca, cb) for s, v in c.items() if isinstance(v, dict) for k in v}
    differ = [f"{s}.{k}" for s, k in sorted(fields) if ca.get(s, {}).get(k) != cb.get(s, {}).get(k)]
    return [d for d in differ if d != "trainer.out"]


def read_record(p: argparse.ArgumentParser, where: str) -> dict:
    """A study record: a file, or ``REV:PATH``, the file as committed at REV (git), or the parser's one-line error."""
    path = Path(where)
    text = path.read_text() if path.is_file() else None
    rev, sep, rel = where.partition(":")
    if text is None and sep and rev and rel:
        shown = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, text=True)
        text = shown.stdout if shown.returncode == 0 else None
    if text is None:
        p.error(f"no study record at {where} (a file, or REV:PATH as committed at REV)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        p.error(f"{where} is not a study record: {e}")


def replaced(old: dict) -> bool:
    """Whether a recorded run's folder now holds a later finished training (a study made again into the same folder
    at a later commit): its last checkpoint is not the one the record names, so the folder is reused as the rerun
    and the recorded run, already gone, is not overwritten. A record naming no checkpoint cannot tell: False."""
    ckpt = ROOT / old["run"] / "checkpoints" / "last.ckpt"
    return (bool(old.get("ckpt_sha256")) and (ROOT / old["run"] / "results.json").is_file() and ckpt.is_file()
            and fingerprint(ckpt) != old["ckpt_sha256"])  # fmt: skip


def study_flags(study: dict) -> tuple[list[str], dict, str | None, list[int] | None]:
    """What a study passed to every run beyond scheme and seed: its config and size flags, its position rule, its
    position augmentation and its training sizes (from the record's budget and arguments)."""
    budget = study["budget"]
    flags = ["--config", budget["config"]] if budget.get("config") else []
    flags += ["--img-size", str(budget["img_size"])]
    return flags, pos_rule_of(budget, "rule_"), study.get("pos_aug"), study.get("train_resolutions")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default=str(ROOT / "docs" / "study.json"), help="the record whose runs are rerun")
    p.add_argument("--runs", nargs="+", required=True, metavar="POS:STEM")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", default="runs/rerun", help="folder of the reruns (never the study's own)")
    p.add_argument("--json", default=str(ROOT / "docs" / "rerun.json"))
    args = p.parse_args(argv)
    run_specs(p, args.runs)
    path = Path(args.study)
    study = read_record(p, args.study)
    name = str(path.relative_to(ROOT)) if path.is_file() and path.is_relative_to(ROOT) else args.study
    recorded = {(r["spec"], r["seed"]): r for r in study.get("runs", [])}
    missing = [f"{s} seed {k}" for s in args.runs for k in args.seeds if (s, k) not in recorded]
    if missing:
        p.error(f"{args.study} records no run {', '.join(missing)}")
    out = ROOT / args.out
    if any((ROOT / recorded[(s, k)]["run"]).resolve().is_relative_to(out.resolve()) and not replaced(recorded[(s, k)])
           for s in args.runs for k in args.seeds):  # fmt: skip
        p.error(f"--out {args.out} holds the study's own runs: a rerun must not overwrite them")
    flags, rule, aug, sizes = study_flags(study)
    target = Path(args.json)
    earlier = json.loads(target.read_text()) if target.is_file() else {}
    # each row names the command that made it: one record gathers the reruns of several commands
    rows = [{"command": earlier.get("command"), **r} for r in earlier.get("reruns", [])]
    command = shlex.join(["python", "-m", "benchmarks.rerun", *argv])
    for spec in args.runs:
        for seed in args.seeds:
            old = recorded[(spec, seed)]
            pos, _, stem = spec.partition(":")
            run_dir, run_flags = study_run(out, pos, stem, seed, rule, {}, has_pos_params(spec), aug, sizes)
            if run_dir.name != Path(old["run"]).name:  # the folder names the flags: the same name, the same command
                p.error(
                    f"{spec} seed {seed}: the study's run {old['run']} was not made by these flags ({run_dir.name})"
                )
            new = train_run(run_dir, [*flags, *run_flags])
            # the study trained again into the recorded run's own folder: the recorded files are gone, not compared
            kept = (ROOT / old["run"]).resolve() != run_dir.resolve()
            old_ckpt, new_ckpt = ROOT / old["run"] / "checkpoints" / "last.ckpt", run_dir / "checkpoints" / "last.ckpt"
            diff = weight_difference(old_ckpt, new_ckpt) if kept and old_ckpt.is_file() else None
            configs = [ROOT / old["run"] / "config.yaml", run_dir / "config.yaml"]
            row = {"spec": spec, "seed": seed, "study": name, "command": command, "recorded": old, "rerun": new,
                   "max_weight_difference": diff,
                   "config_differences": config_differences(*configs) if kept and all(map(Path.is_file, configs))
                   else None}  # fmt: skip
            rows = [r for r in rows if (r["spec"], r["seed"], r["study"]) != (spec, seed, row["study"])] + [row]
            write_record(target, "rerun.py", argv, reruns=rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
