"""docs/claims.md: the published resolution claims of docs/anchors.yaml that need schemes beyond the summary's six
(LookHere, DINOv3's normalised RoPE, Swin v2's log-spaced CPB, RoPE-Mixed, LieRE), each held as a paired difference
against the runs of the scheme it was published against (the summary's, or another of this record). From
docs/claims.json (benchmarks/study.py with ``--runs lookhere:patch ... --json docs/claims.json``, runs trained at the
budget of docs/study.json; it holds the summary's other chosen schemes too) and docs/study.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.pages.common import anchors, fill, lines, merged, signed, table
from benchmarks.pages.frontier import difference_text
from benchmarks.pages.summary import Study, head, label, study_machines
from benchmarks.stats import Difference, holm, paired

# every column above the training size that the study measures (4x: its --far, each scheme's chosen method only)
COLUMNS = [("zoom", 1.0), ("zoom", 1.5), ("zoom", 2.0), ("zoom", 4.0), ("canvas", 1.5), ("canvas", 2.0),
           ("canvas", 4.0)]  # fmt: skip
# the anchors held here; each names its scheme, the scheme it was published against and, where the claim is about
# one way of serving a new grid, that method (else each side serves it with its validation-chosen method)
HELD = ["lookhere", "dinov3_rope", "swin_v2_cpb", "rope_vit_imagenet", "liere_synthetic"]
# the anchors held on other pages, and the anchors no study here can hold yet: the schemes each needs and their cost
ELSEWHERE = {
    "fire_extrapolation": "[frontier.md](frontier.md#a-published-claim)",
    "small_data_cifar": "[fashion_mnist_study.md](fashion_mnist_study.md#a-published-ordering)",
}
NOT_HELD: dict[str, tuple[tuple[str, ...], str]] = {}


def needs(key: str, have: set[str]) -> str:
    """What the claims page lacks to hold ``key`` of NOT_HELD: the schemes no record holds yet, and what they cost."""
    specs, cost = NOT_HELD[key]
    missing = [label(s) for s in specs if s not in have]
    return f"{' and '.join(missing) or 'nothing'} in this study ({cost})"


@dataclass(frozen=True)
class Claim:
    key: str  # its entry in docs/anchors.yaml
    a: str  # POS:STEM
    b: str
    b_method: str | None  # None: b's validation-chosen method
    factor: float | None  # the scale factor it was published at, if one

    @classmethod
    def of(cls, key: str) -> Claim:
        e = anchors()[key]
        factor = e["test_px"] / e["train_px"] if "test_px" in e else None
        return cls(key, f"{e['scheme']}:patch", f"{e['against']}:patch", e.get("against_method"), factor)

    def b_label(self) -> str:
        return label(self.b) + (f" (`{self.b_method}`)" if self.b_method else "")


def values(study: Study, spec: str, method: str | None, column: tuple[str, float]) -> dict[int, float]:
    """Test top-1 per seed of ``spec`` in ``column``, under ``method`` (None: its chosen one)."""
    if method is None:
        return study.values(spec, column)
    return study.methods.get((spec, column[0], method, round(column[1] * study.train)), {})


def differences(study: Study, claims: list[Claim]) -> dict[tuple[str, tuple], Difference]:
    """a - b of every claim in every column above the training size where both have two or more seeds in common,
    paired by seed (both trained from the same seed on the same data) and Holm-corrected together."""
    found = {}
    for c in claims:
        for column in COLUMNS[1:]:
            x, y = values(study, c.a, None, column), values(study, c.b, c.b_method, column)
            shared = sorted(set(x) & set(y))
            if len(shared) >= 2:
                found[(c.key, column)] = paired([x[k] for k in shared], [y[k] for k in shared])
    return dict(zip(found, holm(list(found.values())), strict=True))


def verdict_lines(claim: Claim, diffs: dict) -> list[str]:
    """The claim (a above b) per regime: at the measured factor nearest the published one, or at every factor."""
    out = []
    for regime in ("zoom", "canvas"):
        got = sorted(c[1] for k, c in diffs if k == claim.key and c[0] == regime)
        if not got:
            out.append(f"- {regime.capitalize()}: no factor above 1x has two seeds of both schemes yet.")
            continue
        if claim.factor is not None:
            got = [min(got, key=lambda f: abs(f - claim.factor))]
        for f in got:
            d = diffs[(claim.key, (regime, f))]
            word = {"above": "agrees", "below": "disagrees"}.get(d.verdict, "not separated (the runs cannot tell)")
            where = f" (published at {claim.factor:.2f}x)" if claim.factor is not None else ""
            out.append(
                f"- {head(regime, f)}{where}: {label(claim.a)} above {claim.b_label()}: {word}, {signed(d.diff)} "
                f"[{signed(d.low)}, {signed(d.high)}] points (paired over {d.n_a} seeds, Holm p = {d.p_holm:.3g})."
            )
    return out


def claim_section(claim: Claim, diffs: dict) -> str:
    e = anchors()[claim.key]
    published = ""
    if "points" in e:
        published = f" It reports {e['points']:+g} points for {label(claim.a)} over {label(claim.b)}."
    if "top1" in e:  # a ranking: each scheme's top-1 at each published size
        ranks = "; ".join(f"{label(f'{name}:patch')} {', '.join(f'{t:g}' for t in top1)}"
                          for name, top1 in e["top1"].items())  # fmt: skip
        published = f" It reports top-1 (%) at {', '.join(map(str, e['px']))} px: {ranks}."
    return "\n".join(
        [
            f"### {e['source']}",
            "",
            f"{e['setting'][0].upper() + e['setting'][1:]}.{published} Held here: {label(claim.a)} (its chosen "
            f"method) against {claim.b_label()}{'' if claim.b_method else ' (its chosen method)'}.",
            "",
            lines(verdict_lines(claim, diffs)),
        ]
    )


def trained_apart(data: dict, main: dict, against: set[str], named: set[str]) -> str:
    """A line where the table's rows were trained at more than one commit: the schemes the claims are held against
    (from ``main``, docs/study.json) and the claims' own (``data``, docs/claims.json); empty where one commit trained
    them all."""

    def trained(runs: list[dict], specs: set[str]) -> str:
        return ", ".join(sorted({r.get("commit", "no commit recorded") for r in runs if r["spec"] in specs}))

    theirs, ours = trained(main.get("runs", []), against), trained(data.get("runs", []), named - against)
    if theirs == ours:
        return ""
    return (
        f"\n\nThe table's rows were trained at more than one commit: {', '.join(map(label, sorted(against)))} "
        f"come from docs/study.json (commit {theirs}), the others from docs/claims.json (commit {ours}). Whether those "
        "commits train alike is checked run by run in [summary.md](summary.md#reruns-of-recorded-runs)."
    )


def render(data: dict, folder: Path, main: dict | None) -> str:
    """docs/claims.md from docs/claims.json and ``main``, docs/study.json (the runs claims are held against)."""
    claims = [Claim.of(k) for k in HELD]
    ours = {r["spec"] for r in data.get("runs", [])}
    against = {c.b for c in claims} - ours
    if main is None or main.get("budget") != data.get("budget"):
        raise SystemExit("docs/claims.json and docs/study.json differ in budget: their runs cannot be paired")
    study = Study(merged(data, main, against) | {"finetuned": []})  # the page has no fine-tuned column
    diffs = differences(study, claims)
    rows = [[f"{label(c.a)} − {c.b_label()}", *(difference_text(diffs.get((c.key, col))) for col in COLUMNS[1:])]
            for c in claims]  # fmt: skip
    # the claims' schemes only: the record may hold other schemes' runs (the summary reads those)
    named = {s for c in claims for s in (c.a, c.b)}
    seeds = {s: v for s, v in study.seeds().items() if s in named}
    have = {s for s, v in seeds.items() if v}
    return fill(
        "claims.md",
        command=data["command"],
        seeds=", ".join(f"{label(s)} {len(v)}" for s, v in seeds.items() if v),
        far=", ".join(f"{label(s)} {len(study.values(s, ('zoom', 4.0)))}" for s, v in seeds.items() if v),
        table=study.table(COLUMNS, [s for s in study.specs if s in named]),
        differences=table(["difference (points)", *(head(*c) for c in COLUMNS[1:])], rows),
        claims="\n\n".join(claim_section(c, diffs) for c in claims),
        elsewhere=lines([f"- {anchors()[k]['source']}: held on {where}." for k, where in ELSEWHERE.items()]),
        not_held=lines([f"- {anchors()[k]['source']}: needs {needs(k, have)}." for k in NOT_HELD])
        or "None: every claim of docs/anchors.yaml is held above or on the page named.",
        machines=study_machines(study.data) + trained_apart(data, main, against, named),
    )
