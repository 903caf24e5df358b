"""What the pages share: reading a study's JSON, formatting cells and tables, filling a page's template, naming
schemes and position rules, the line under a page's title, and drawing a figure."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from string import Template

import yaml

from benchmarks.rules import option_leaves, pos_rule_of
from benchmarks.stats import mean_ci

DOCS = Path(__file__).resolve().parents[2] / "docs"
HERE = Path(__file__).resolve().parent
CHANCE, BAG_CEILING = 0.125, 0.25  # `shapes`: 8 classes; a model blind to patch order tells 2 of them apart


def read(path: Path) -> dict | None:
    """A benchmark's JSON record, if there is one (a bare list, such as the evaluator's own resolution.json, is
    none)."""
    data = json.loads(path.read_text()) if path.is_file() else None
    return data if isinstance(data, dict) else None


def tiny_model(spec: str, img_size: int = 8):
    """A small vitpos ViT of POS:STEM (patch 4, 16 wide, one block) for what the pages read from the code itself: a
    scheme's methods, its default, where fine-tuning starts."""
    import vitpos

    pos, _, stem = spec.partition(":")
    return vitpos.create_model(pos, stem=stem or "patch", img_size=img_size, patch_size=4, embed_dim=16, depth=1,
                               num_heads=2)  # fmt: skip


def anchors() -> dict:
    """The published numbers the pages hold the measurements against (docs/anchors.yaml)."""
    return yaml.safe_load((DOCS / "anchors.yaml").read_text())


def fill(template: str, **blocks: str | None) -> str:
    """The page: its template (beside this file) with every $name replaced; a missing name is an error. A paragraph
    that holds a name given as None is left out, and so are the blank lines an empty block leaves."""
    text = (HERE / template).read_text()
    gone = [name for name, value in blocks.items() if value is None]
    kept = [p for p in text.split("\n\n") if not any(re.search(rf"\$\{{?{n}(?!\w)", p) for n in gone)]
    filled = Template("\n\n".join(kept)).substitute({k: v for k, v in blocks.items() if v is not None})
    return re.sub(r"\n{3,}", "\n\n", filled).strip("\n") + "\n"


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def fields(record: dict, *keys: str) -> dict[str, str]:
    """Fields of a record as a template's blocks, each as Python prints it."""
    return {k: str(record[k]) for k in keys}


def lines(items: list[str]) -> str:
    """A block of lines (a list), empty where there are none."""
    return "\n".join(items)


def pct(v: float) -> str:
    return "—" if v is None or math.isnan(v) else f"{100 * v:.1f}"


def cell(values: list[float]) -> str:
    """A mean over seeds with its 95 % t-interval's half-width, or the single value marked as one seed."""
    if not values:
        return "—"
    m, lo, hi = mean_ci(values)
    if len(values) == 1:
        return f"{pct(m)}¹"
    return f"{pct(m)} ±{100 * (hi - lo) / 2:.1f}"


def signed(v: float) -> str:
    return f"{100 * v:+.1f}"


def spread(v: list[float], spec: str) -> str:
    """The median over rounds, (lowest to highest round)."""
    return f"{median(v):{spec}}" + (f" ({min(v):{spec}} to {max(v):{spec}})" if len(v) > 1 else "")


def per_round(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def machines(*records: list[dict]) -> list[str]:
    """The distinct hardware / device / commit / torch / threads of records, each as one phrase."""
    seen = {(r.get("hardware", "?"), r.get("device", "?"), r.get("commit", "?"), r.get("torch", "?"),
             str(r.get("threads", "")))
            for recs in records for r in recs}  # fmt: skip

    def threads(n: str) -> str:
        return f", {n} thread{'s' if n != '1' else ''}" if n else ", threads not recorded"

    return [f"{h} ({d}), torch {t}, commit {c}{threads(n)}" for h, d, c, t, n in sorted(seen)]


def same_checkpoint(a: dict, b: dict) -> bool:
    """Whether two run entries hold one checkpoint (both record a hash, and it is equal): a record that reuses another
    record's runs holds no rerun of them."""
    return a.get("ckpt_sha256") is not None and a.get("ckpt_sha256") == b.get("ckpt_sha256")


def held_only(entries: list[dict], held: list[str] | set[str]) -> list[dict]:
    """The run, cell or entropy entries of a record that belong to the schemes ``held`` (a run names its ``spec``,
    a cell or an entropy entry its ``scheme`` and ``stem``)."""
    return [e for e in entries if e.get("spec", f"{e.get('scheme')}:{e.get('stem')}") in held]


def merged(base: dict, extra: dict, specs: set[str]) -> dict:
    """A study's JSON ``base`` with ``extra``'s runs, records, method choices, attention entropy, patch-shuffle rows
    and fine-tuning runs of the schemes ``specs`` (POS:STEM) beside its own; ``base``'s choices win. Both must be
    made at one budget, or their runs could not be read side by side."""
    if base.get("budget") != extra.get("budget"):
        raise SystemExit("two study records differ in budget: their runs cannot be read side by side")

    return (
        base
        | {
            key: base.get(key, []) + held_only(extra.get(key, []), specs)
            for key in ("runs", "records", "entropy", "shuffle", "finetuned")
        }  # fmt: skip
        | {"choices": {k: v for k, v in extra.get("choices", {}).items() if k in specs} | base.get("choices", {})}
    )


def measured_line(d: dict) -> str:
    """The line under a page's title: the command that measured, the machine and, where recorded, its load."""
    m = d["machine"]
    where = f"{m['date']}, {m['cpu']}, {m['cores']} cores, torch {m['torch']}"
    if "gpu" in m:
        where += f", {m['gpu']} (driver {m.get('driver', 'unknown')}, CUDA {m.get('cuda', 'unknown')})"
    if "commit" in m:  # records made before the header named its code leave it to their runs' stamps
        where += f", commit {m['commit']}"
    if "load_average" in d:
        where += f", 1-minute load average {d['load_average'][0]:g} at the start"
        if d["load_average"][0] > m["cores"] and "repeats" in d:  # a timed benchmark: rounds, round-robin
            where += (
                f" (over {m['cores']}: other work shared the machine, so the ratios within a round are what compare)"
            )
    return f"Made by `{d['command']}`, then `python -m benchmarks.pages`: {where}."


# -- schemes and position rules ----------------------------------------------------------------------------------
def label(pos: str, stem: str) -> str:
    """A scheme as a page names it: POS, or POS|OPTIONS for a run with scheme options (see ``scheme_of``)."""
    pos, _, opts = pos.partition("|")
    return f"`{pos}`" + (f" ({opts})" if opts else "") + (" (conv stem)" if stem == "conv" else "")


def scheme_of(r: dict) -> str:
    """A run's scheme as a key: POS, and |KEY=VALUE, ... where it set scheme options (a composition's part's
    options by their own keys), so runs with other options are not pooled with the scheme's defaults."""
    opts = [f"{k}={v:g}" for k, v in option_leaves(r.get("pos_kwargs") or {})]
    return r["pos"] + ("|" + ", ".join(opts) if opts else "")


def run_rule(r: dict, prefix: str = "") -> tuple:
    """A run's position rule (``prefix`` "default_": the default a budget names), as a key."""
    return tuple(pos_rule_of(r, prefix).values())


def epochs_text(n: float) -> str:
    return f"{n:g} epoch{'' if n == 1 else 's'}"


def rule_label(rule: tuple, default: tuple) -> str:
    """A rule as a column names it: the scale, its ramp, the decay and its target; (default) for the default."""
    scale, decay, to, ramp = rule
    ramped = f", ramped over {epochs_text(ramp)}" if ramp else ""
    pulled = f", {decay:g} to {to}" if decay else ""
    return f"x {scale:g}{ramped}{pulled}" + (" (default)" if rule == default else "")


def rule_words(rule: tuple) -> str:
    """A position rule in words, with the flags that set it."""
    scale, decay, decay_to, ramp = rule
    return (f"position parameters at lr x {scale:g} (`--pos-lr-scale`)"
            + (f" ramped in over {epochs_text(ramp)} (`--pos-lr-warmup-epochs`)" if ramp else "")
            + (f" with a decay of {decay:g} towards {'their start' if decay_to == 'start' else 'zero'} "
               "(`--pos-weight-decay`, `--pos-decay-to`)" if decay else " without decay"))  # fmt: skip


def rule_line(names: list[str], results: dict | None, command: str) -> str | None:
    """The position rule the named runs (folder names) trained under, from docs/rules.json; whether the
    default."""
    runs = {Path(r["run"]).name: r for r in (results or {}).get("runs", [])}
    rules = sorted({run_rule(runs[n]) for n in names if n in runs and runs[n].get("pos_params")})
    if not rules:
        return None
    line = "The runs trained their " + "; others their ".join(rule_words(ru) for ru in rules) + "."
    default = run_rule(results["budget"], "default_")
    optioned = sorted({scheme_of(runs[n]) for n in names if n in runs and runs[n].get("pos_kwargs")})
    if rules != [default]:
        line += f" The default rule differs ({rule_words(default)})."
    if optioned:
        named = ", ".join(label(s, "patch") for s in optioned)
        line += f" Runs with scheme options, not the scheme's defaults: {named}."
    if rules != [default] or optioned:
        line += f" `{command}` again takes the runs at the defaults."
    return line


# -- figures ---------------------------------------------------------------------------------------------------
@contextmanager
def figure(png: Path, legend: str) -> Iterator:
    """The axes of a figure drawn without a display, saved to ``png`` with its legend at ``legend``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    yield ax
    ax.legend(fontsize=7, loc=legend)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
