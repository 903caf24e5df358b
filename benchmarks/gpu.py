"""The record of one run of .ci/gpu_check.sh: the machine, each part's outcome, the CUDA tests and the Fashion-MNIST
transfer runs, in DIR/gpu.json (``python -m benchmarks.pages DIR`` renders DIR/gpu.md from it and the records
beside it).

    python -m benchmarks.gpu start DIR --command "bash .ci/gpu_check.sh"
    python -m benchmarks.gpu part DIR NAME --rc RC --seconds S --limit L [--junit FILE]
    python -m benchmarks.gpu fashion-mnist DIR RUN_DIR ...

Each call rewrites gpu.json whole, so the record holds every part that finished when a later one runs out of time.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.common import run_results, write_record

SWEEP_KEYS = ("resolution", "regime", "method", "top1", "samples", "split")  # what the page reads of a sweep row


def junit(path: Path) -> dict:
    """pytest's JUnit XML as counts, and the names of the tests that failed (empty where the file is missing)."""
    if not path.is_file():
        return {}
    cases = list(ET.parse(path).getroot().iter("testcase"))
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in cases if c.find("failure") is not None
              or c.find("error") is not None]  # fmt: skip
    skipped = sum(c.find("skipped") is not None for c in cases)
    return {"tests": len(cases), "failed": failed, "skipped": skipped, "passed": len(cases) - len(failed) - skipped}


def fashion_mnist(run_dirs: list[Path]) -> list[dict]:
    """Per run: its scheme, epochs, top-1 and seconds (results.json), where it was made (provenance.json), and its
    validation sweep over sizes and transfer methods (sweep/resolution.json, from ``vitpos.evaluate``)."""
    rows = []
    for run in run_dirs:
        res_path, sweep_path = run / "results.json", run / "sweep" / "resolution.json"
        if not res_path.is_file():
            rows.append({"run": str(run), "finished": False})
            continue
        res = json.loads(res_path.read_text())
        made = json.loads((run / "provenance.json").read_text()) if (run / "provenance.json").is_file() else {}
        sweep = json.loads(sweep_path.read_text()) if sweep_path.is_file() else []
        rows.append({"run": str(run), "finished": True, "pos": res["pos"], "epochs": res["epochs"],
                     **run_results(res), **made,
                     "sweep": [{k: r[k] for k in SWEEP_KEYS if k in r} for r in sweep]})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("start", help="a new record: the machine and the check's command")
    s.add_argument("dir")
    s.add_argument("--command", required=True)
    s = sub.add_parser("part", help="one part's outcome")
    s.add_argument("dir")
    s.add_argument("name")
    s.add_argument("--rc", type=int, required=True)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--limit", type=float, required=True)
    s.add_argument("--junit", help="pytest's JUnit XML of a test part")
    s = sub.add_parser("fashion-mnist", help="the Fashion-MNIST runs and their sweeps")
    s.add_argument("dir")
    s.add_argument("runs", nargs="+")
    a = p.parse_args(argv)
    path = Path(a.dir) / "gpu.json"
    if a.verb == "start":
        record = {"check": a.command, "parts": [], "fashion_mnist": []}
    elif not path.is_file():
        p.error(f"{path} not found: 'start' makes it")
    else:
        record = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("command", "machine")}
        record.pop("load_average", None)
    if a.verb == "part":
        part = {"name": a.name, "rc": a.rc, "timed_out": a.rc in (124, 137), "seconds": a.seconds, "limit": a.limit}
        if a.junit:
            part["junit"] = junit(Path(a.junit))
        record["parts"] = [q for q in record["parts"] if q["name"] != a.name] + [part]
    elif a.verb == "fashion-mnist":
        record["fashion_mnist"] = fashion_mnist([Path(r) for r in a.runs])
    write_record(path, "gpu.py", argv, **record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
