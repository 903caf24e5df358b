"""docs/results.md: every scheme trained on `shapes` at the default budget, every position rule measured, and what
the intervals over seeds allow, from docs/results.json."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks.pages.common import (
    BAG_CEILING,
    CHANCE,
    anchors,
    comparisons,
    fields,
    fill,
    hardware_line,
    interval,
    label,
    lines,
    measured_line,
    pct,
    rule_label,
    rule_words,
    run_row,
    run_rule,
    scheme_of,
    table,
)
from benchmarks.stats import mean_ci, separated

LEARN_BAR = 0.9  # the test top-1 `learned` and `relbias` are held to at the default budget


def rule_order(rule: tuple) -> tuple:
    """Where a rule's column goes: without decay first, then towards zero, then towards the start; unramped before
    ramped; then by decay, ramp and scale. Every field counts, so the columns do not follow a set's hash order."""
    scale, decay, to, ramp = rule
    return decay > 0, to == "start", ramp > 0, decay, ramp, scale


def against(them: list[float], on: list[float]) -> str:
    """The default's runs ``on`` against another rule's ``them``: intervals when both have seeds, else a one-seed
    value against the other side's interval."""
    if not them:
        return "—"
    if len(them) > 1 and len(on) > 1:
        if not separated(them, on):
            return "not separated"
        return "default above" if mean_ci(on)[0] > mean_ci(them)[0] else "default below"
    if len(them) == len(on) == 1:
        return f"{100 * (on[0] - them[0]):+.1f} points (one seed each)"
    one, many, who, whose = (
        (them[0], on, "it", "the default's") if len(them) == 1 else (on[0], them, "the default", "its")
    )
    _, lo, hi = mean_ci(many)
    where = "inside" if lo <= one <= hi else "above" if one > hi else "below"
    return f"{who} (one seed) {where} {whose} 95 % interval"


def render(d: dict, folder: Path) -> str:
    b = d["budget"]
    default = run_rule(b, "default_")
    off = run_rule({"pos_lr_scale": 1.0})
    before = run_rule({"pos_lr_scale": default[0]})  # the default scale alone, from the first step: the first rule
    baselines = [ru for ru in dict.fromkeys([off, before]) if ru != default]
    by = defaultdict(list)  # (pos, stem, rule) -> runs
    for r in d["runs"]:
        by[scheme_of(r), r["stem"], run_rule(r)].append(r)
    order = list(dict.fromkeys((scheme_of(r), r["stem"]) for r in d["runs"]))
    trained = [k for k in order if by.get((*k, default)) and "|" not in k[0]]  # the default rule and options
    learns = [k for k in trained if by[(*k, default)][0]["pos_params"]]  # schemes with position parameters
    # ... and those runs with other scheme options, whose runs under other rules the rule tables show too
    with_params = {(scheme_of(r), r["stem"]) for r in d["runs"] if r["pos_params"]}
    measured = learns + [k for k in order if k not in learns and k in with_params]
    rules = sorted({run_rule(r) for r in d["runs"] if r["pos_params"]}, key=rule_order)

    def top1(key: tuple[str, str], rule: tuple = default) -> list[float]:
        return [r["test_top1"] for r in sorted(by.get((*key, rule), []), key=lambda r: r["seed"])]

    def short(rule: tuple) -> list[str]:
        """What a rule leaves short: `learned` and `relbias` seeds under the bar, schemes below the rule off."""
        under = [
            f"{label(*k)} seed {r['seed']} ({pct(r['test_top1'])})"
            for base in ("learned", "relbias")
            for k in measured
            if k[1] == "patch" and k[0].partition("|")[0] == base
            for r in sorted(by.get((*k, rule), []), key=lambda r: r["seed"])
            if r["test_top1"] < LEARN_BAR
        ]
        below = []
        for k in measured:
            them, on = top1(k, off), top1(k, rule)
            if len(them) < 2 or not on:
                continue
            _, lo, hi = mean_ci(them)
            if (len(on) < 2 or separated(them, on)) and mean_ci(on)[0] < lo:
                below.append(f"{label(*k)} {interval(on)} against [{pct(lo)}, {pct(hi)}]")
        runs = sum(1 for r in d["runs"] if r["pos_params"] and run_rule(r) == rule)
        return [rule_label(rule, default), "; ".join(under) or "none", "; ".join(below) or "none", str(runs)]

    fitted = {k: [r["train_top1"] for r in by[(*k, default)] if r.get("train_top1") is not None] for k in trained}
    allowed = comparisons({k: top1(k) for k in trained})
    if by.get(("none", "patch", default)):
        allowed.insert(0, f"- `none` with the patch stem (exactly blind to patch order) scores "
                          f"{pct(mean_ci(top1(('none', 'patch')))[0])} %, against the {pct(BAG_CEILING)} % a bag "
                          "of patches can reach.")  # fmt: skip
    blind = [label(*k) for k in trained if k != ("none", "patch") and mean_ci(top1(k))[0] <= BAG_CEILING + 0.01]
    if blind:
        allowed.append(f"- At the bag-of-patches ceiling: {', '.join(blind)}. The classes are the four directions "
                       "from the reference to the circle, and a scheme whose attention is unchanged under mirroring "
                       "the patch grid (`alibi2d`'s bias is a function of the offset's length only) cannot tell them "
                       "apart.")  # fmt: skip
    ref = anchors()["small_data_cifar"]
    main = {tuple(t.split(":")) for t in [*d.get("main_runs", []), *d.get("top_others", [])]}
    more_seeds = [label(*k) for k in trained if k not in main and len(top1(k)) > 1]
    others = [k for k in trained if k not in main]
    if others and len(more_seeds) == len(others):
        more = "; so is every other scheme, for the comparisons below and in docs/resolution.md"
    elif more_seeds:
        has = "has" if len(more_seeds) == 1 else "have"
        more = f"; {', '.join(more_seeds)} {has} further seeds for the comparisons below and in docs/resolution.md"
    else:
        more = ""
    return fill(
        "results.md",
        measured=measured_line(d),
        **fields(
            b,
            "embed_dim",
            "depth",
            "num_heads",
            "patch_size",
            "img_size",
            "train_size",
            "epochs",
            "batch_size",
            "val_size",
            "test_size",
        ),
        lr=f"{b['lr']:g}",
        rule=rule_words(default),
        chance=pct(CHANCE),
        ceiling=pct(BAG_CEILING),
        top_others=", ".join(label(*t.split(":")) for t in d.get("top_others", [])),
        more_seeds=more,
        hardware=hardware_line([r for k in trained for r in by[(*k, default)]], "the runs in this table"),
        runs=table(
            ["scheme", "test top-1", "best val top-1", "train top-1", "train time"],
            [run_row(k, by[(*k, default)], interval(fitted[k])) for k in trained],
        ),
        no_params=", ".join(label(*k) for k in trained if k not in learns),
        rules=table(
            ["scheme", *(rule_label(ru, default) for ru in rules)],
            [
                [label(*k), *(interval(top1(k, ru)) for ru in rules)]
                for k in measured
                if sum(1 for ru in rules if top1(k, ru)) > 1
            ],
        ),
        against_what=" and against the same scale without a decay" if before != default else "",
        against=table(
            ["scheme", *(f"against {rule_label(ru, default)}" for ru in baselines)],
            [[label(*k), *(against(top1(k, ru), top1(k)) for ru in baselines)] for k in learns],
        ),
        bar=f"{100 * LEARN_BAR:g}",
        short=table(
            ["rule", f"under {100 * LEARN_BAR:g} %", "below the rule off", "runs (schemes with position parameters)"],
            [short(ru) for ru in rules if ru != off],
        ),
        allowed=lines(allowed),
        ref_source=ref["source"],
        ref_setting=ref["setting"],
        ref_cifar10=", ".join(f"{k} {v}" for k, v in ref["cifar10"].items()),
    )
