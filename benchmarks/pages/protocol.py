"""docs/protocol.md: what each default was chosen on (validation), from docs/protocol.json and the studies' records
(docs/study.json, docs/others.json, docs/claims.json, docs/frontier.json, docs/methods.json)."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

from benchmarks.pages.common import fill, pct, signed, table, tiny_model
from benchmarks.pages.frontier import difference_text
from benchmarks.stats import Difference, holm, paired


def rule_text(rule: dict) -> str:
    decay = (
        "no decay"
        if not rule["pos_weight_decay"]
        else f"decay {rule['pos_weight_decay']:g} towards {rule['pos_decay_to']}"
    )
    ramp = f"ramped in over {rule['pos_lr_warmup_epochs']:g} epochs" if rule["pos_lr_warmup_epochs"] else "no ramp"
    return f"lr x{rule['pos_lr_scale']:g}, {decay}, {ramp}"


def methods_of(spec: str) -> tuple[str, tuple[str, ...]]:
    """(vitpos's default transfer method, every method) of a POS:STEM model."""
    scheme = tiny_model(spec).pos
    return scheme.method, tuple(scheme.methods)


def default_method(spec: str) -> str:
    """The transfer method a POS:STEM model serves a new grid with unless told otherwise (vitpos's default)."""
    return methods_of(spec)[0]


def unchosen(choices: dict) -> str:
    """The registry's schemes with a choice of method that no study has swept on validation: their default is not a
    measured choice yet, and the page says so."""
    from vitpos.pos import POS_SCHEMES

    rows = []
    for pos in POS_SCHEMES:
        default, methods = methods_of(f"{pos}:patch")
        if f"{pos}:patch" not in choices and len(methods) > 1:
            rows.append([f"`{pos}`", f"`{default}`", ", ".join(f"`{m}`" for m in methods)])
    if not rows:
        return ""
    return ("No study has swept these schemes on validation yet, so their default is not a measured choice: each keeps "
            "the one it was given when it was added ([schemes.md](schemes.md)) until a sweep chooses.\n\n"
            + table(["scheme", "vitpos's default (not chosen on validation)", "methods"], rows))  # fmt: skip


# Where vitpos's default differs from the validation choice, and why: the method validation chose (so that a new
# choice reopens the question) and the reason. A test holds every other default to the choice.
DEFAULT_EXCEPTIONS: dict[str, tuple[str, str]] = {}


# A choice won by less than this (a fraction of top-1) over the next method is named as not settled by the runs
CLOSE = 0.01

# The records (docs/<name>.json) whose validation sweeps choose transfer methods, in the order that breaks a tie
METHOD_RECORDS = ("study", "others", "claims", "frontier", "methods")


def chosen_methods(studies: dict[str, dict | None]) -> dict[str, tuple[dict, str]]:
    """Per POS:STEM, the choice (method, per-method validation means, cells) that the most validation cells made, and
    the record that made it: a scheme two records sweep is served by the larger sweep, the first record on a tie."""
    out: dict[str, tuple[dict, str]] = {}
    for name, data in studies.items():
        for spec, c in (data or {}).get("choices", {}).items():
            if spec not in out or c["cells"] > out[spec][0]["cells"]:
                out[spec] = (c, name)
    return out


def method_table(studies: dict[str, dict | None]) -> str:
    """Each scheme's validation-chosen method (:func:`chosen_methods`) beside vitpos's default and the record that
    chose it, with the reason under the table where the two differ."""
    choices = chosen_methods(studies)
    if not choices:
        return "Not chosen yet: the study has swept no checkpoint on validation."
    rows, notes, close = [], [], []
    for spec, (c, name) in sorted(choices.items()):
        seeds = {r["seed"] for r in (studies[name] or {}).get("records", [])
                 if r["split"] == "val" and f"{r['scheme']}:{r['stem']}" == spec}  # fmt: skip
        means = sorted(c["val_mean"].values(), reverse=True)
        margin = means[0] - means[1] if len(means) > 1 else None
        if margin is not None and margin < CLOSE:
            close.append(f"`{spec}` {signed(margin)} ({len(seeds)} seed{'s' * (len(seeds) != 1)})")
        default = default_method(spec)
        mark = ""
        if default != c["method"]:
            mark = f" ({len(notes) + 1})"
            why = DEFAULT_EXCEPTIONS.get(spec, (None, "no reason recorded"))[1]
            notes.append(f"({len(notes) + 1}) `{spec}`: {why}.")
        per_method = ", ".join(f"{m} {pct(v)}" for m, v in sorted(c["val_mean"].items()))
        rows.append([f"`{spec}`", f"`{c['method']}`", f"`{default}`{mark}", per_method,
                     "—" if margin is None else signed(margin), str(c["cells"]), str(len(seeds)),
                     f"docs/{name}.json"])  # fmt: skip
    heads = ["scheme", "chosen", "vitpos's default", "mean validation top-1 (%) per method",
             "margin over the next (points)", "cells", "seeds", "chosen in"]  # fmt: skip
    unsettled = ""
    if close:
        unsettled = (f"Chosen by less than {CLOSE * 100:g} point over the next method: {', '.join(close)}. "
                     "Validation prefers the chosen method there, but by less than the noise of one cell (1,000 "
                     "images, about ±3 points at 95 %): the runs do not settle which serves a new grid better, and "
                     "more seeds could reverse the choice.")  # fmt: skip
    return "\n\n".join([table(heads, rows), *notes, *filter(None, [unsettled, unchosen(choices)])])


def per_seed(record: dict, split: str, spec: str, regime: str, sizes: set[int]) -> dict[str, dict[int, float]]:
    """method -> {seed: mean top-1 over ``sizes``} of a record's plain sweep cells (no control) of one scheme and
    regime on ``split``; a seed counts only where it has every one of the sizes."""
    got: dict[str, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in record.get("records", []):
        plain = "control" not in r and "control" not in r.get("sweep", {})
        if (
            plain
            and (r["split"], r["regime"], f"{r['scheme']}:{r['stem']}") == (split, regime, spec)
            and (r["resolution"] in sizes)
        ):
            got[r["method"]][r["seed"]][r["resolution"]] = r["top1"]
    return {m: {k: mean(v.values()) for k, v in by_seed.items() if set(v) == sizes} for m, by_seed in got.items()}


def regime_split(studies: dict[str, dict | None]) -> str:
    """Where the method validation picks within one regime differs from the one picked over both: each such scheme
    and regime, the validation margin, and on test (where the record swept both methods) the regime's pick minus the
    pooled pick, paired by seed and Holm-corrected over the table."""
    rows: list[tuple[list[str], Difference | None]] = []
    compared = 0
    for spec, (c, name) in sorted(chosen_methods(studies).items()):
        record = studies[name] or {}
        train = int(record["budget"]["img_size"])
        val_sizes = {regime: {r["resolution"] for r in record.get("records", [])
                              if r["split"] == "val" and r["regime"] == regime} - {train}
                     for regime in ("zoom", "canvas")}  # fmt: skip
        for regime, sizes in val_sizes.items():
            val = {m: mean(v.values()) for m, v in per_seed(record, "val", spec, regime, sizes).items() if v}
            if c["method"] not in val:
                continue
            compared += 1
            best = max(val, key=lambda m: (val[m], m))
            if best == c["method"]:
                continue
            test = per_seed(record, "test", spec, regime, sizes)
            a, b = test.get(best, {}), test.get(c["method"], {})
            seeds = sorted(set(a) & set(b))
            diff = paired([a[k] for k in seeds], [b[k] for k in seeds]) if len(seeds) >= 2 else None
            rows.append(([f"`{spec}`", regime, f"`{c['method']}`", f"`{best}`", signed(val[best] - val[c["method"]]),
                          str(len(seeds)) if diff else "—"], diff))  # fmt: skip
    if not compared:
        return "No validation sweep per regime to compare yet."
    if not rows:
        return "Within each regime, validation picks the method it picks over both, for every scheme."
    corrected = iter(holm([d for _, d in rows if d is not None]))
    cells = [[*r, difference_text(next(corrected)) if d is not None else "— (test swept with the pooled pick only)"]
             for r, d in rows]  # fmt: skip
    heads = ["scheme", "regime", "picked over both", "picked in this regime", "validation margin (points)",
             "seeds on test", "test: regime's pick minus pooled pick (points)"]  # fmt: skip
    return table(heads, cells)


def studied_seeds(specs: list[str], *records: dict | None) -> str:
    """How many seeds of each scheme the study records hold (the runs a page can read) and their mean best validation
    top-1, e.g. "`liere:patch` none": what seed 0 alone chose, seen over every seed."""
    out = []
    for s in specs:
        val = {r["seed"]: r["best_val_top1"] for rec in records if rec for r in rec.get("runs", []) if r["spec"] == s}
        average = f" (mean validation top-1 {pct(mean(val.values()))} %)" if val else ""
        out.append(f"`{s}` {len(val) or 'none'}{average}")
    return ", ".join(out)


def comparison(t: dict) -> list[str]:
    """One row of the rule table: the other rule, the shared runs, the paired difference with its Holm-corrected
    interval and verdict, and the runs on each side."""
    h = t.get("holm")
    diff = signed(t["mean_diff"]) + (f" [{signed(h['low'])}, {signed(h['high'])}]" if h else "")
    return [rule_text(t["other"]), str(t["pairs"]), diff, h["verdict"] if h else "—", f"{t['wins']} / {t['losses']}"]


def per_scheme(rule: dict) -> str:
    """Validation top-1 of every run that voted, one row per (scheme, seed) and one column per rule, the chosen rule
    first: where each mean difference comes from."""
    votes = rule.get("runs", [])
    if not votes:
        return ""
    order = [rule["chosen"]] + [t["other"] for t in rule["comparisons"] if t["rule"] == rule["chosen"]]
    cells = {(tuple(v["rule"].values()), v["spec"], v["seed"]): v["best_val_top1"] for v in votes}
    keys = sorted({(v["spec"], v["seed"]) for v in votes if v["rule"] in order})

    def val(v: float | None) -> str:  # 2,000 validation images: steps of 0.05 points
        return "—" if v is None else f"{100 * v:.2f}"

    rows = [[f"`{spec}`", str(seed), *(val(cells.get((tuple(r.values()), spec, seed))) for r in order)]
            for spec, seed in keys]  # fmt: skip
    heads = ["scheme", "seed", *(rule_text(r) + (" (chosen)" if r == rule["chosen"] else "") for r in order)]
    return "Validation top-1 (%) of each run that voted:\n\n" + table(heads, rows)


def evidence_text(ev: dict) -> str:
    """Which runs of which record made a choice, on what machine and code, and how many were left out."""
    commit = f"commit {', '.join(ev['commit'])}" if ev.get("commit") else "no commit recorded"
    left = ev.get("left_out", 0)
    out = f"{ev['runs']} runs of `{ev['command']}` in {ev['file']} ({', '.join(ev['hardware'])}; {commit})"
    gone = f"; {left} runs of that record that do not name their machine and commit were left out" if left else ""
    return out + gone


def start_text(start: dict) -> str:
    """Mean validation top-1 per start, the seeds, and the chosen start's paired difference where there is one."""
    out = ", ".join(f"locality {k}: {pct(v)} %" for k, v in start["val_mean"].items())
    out += f" (seeds {', '.join(map(str, start['seeds']))})"
    d = start.get("difference")
    if d:
        out += (f"; the chosen start minus the other: {signed(d['diff'])} [{signed(d['low'])}, {signed(d['high'])}] "
                f"points (paired t over {len(start['seeds'])} seeds, 95 %)")  # fmt: skip
    return out


def render(protocol: dict, studies: dict[str, dict | None]) -> str:
    """docs/protocol.md; each scheme's method from the studies' records by name (``study``: docs/study.json, and the
    others of :data:`METHOD_RECORDS`), as :func:`chosen_methods` picks it."""
    chosen = protocol["rule"]["chosen"]
    rows = [comparison(t) for t in protocol["rule"]["comparisons"] if t["rule"] == chosen]
    start = protocol["start"]
    top = protocol["top_others"]
    ev = protocol["evidence"]
    return fill(
        "protocol.md",
        rule=rule_text(chosen),
        rule_table=table(
            ["other rule", "shared runs", "chosen minus other (points) [interval]", "verdict", "runs above / below"],
            rows,
        ),  # fmt: skip
        evidence=evidence_text(ev),
        per_scheme=per_scheme(protocol["rule"]),
        start=f"`locality` {start['chosen']}" if start["chosen"] is not None else "not chosen",
        start_detail=start_text(start),
        top=", ".join(f"`{s}`" for s in top["chosen"]),
        top_detail=", ".join(f"`{s}` {pct(v)}" for s, v in list(top["seed0_val"].items())[:6]),
        top_seeds=studied_seeds(top["chosen"], *studies.values()),
        methods=method_table(studies),
        regimes=regime_split(studies),
        command=protocol["command"],
    )
