"""The statistics every page uses: a mean with its interval, a difference with its interval (paired where runs pair),
and Holm's correction over the comparisons of one page.

Units are runs (seeds), not images: a seed's top-1 is one observation. A single-seed value is never judged against a
mean's interval: comparisons need at least two runs on each side (two pairs when paired). A verdict is "above" or
"below" where the Holm-adjusted p-value over the page's comparisons is below ``ALPHA``; otherwise the difference is
"not separated", which says the runs cannot tell, never that there is no effect: its interval says how large an
effect they leave possible. Once a page's comparisons are corrected together, each interval is widened to
Bonferroni's level, 1 - ALPHA / m for m comparisons, so that all of them hold together at 95 %. An interval that
excludes zero is then always separated by Holm (which is never less powerful than Bonferroni); Holm may also separate a
difference whose interval just touches zero. Values are top-1 fractions, so a difference lies in [-1, 1] and every
interval is cut to that range: with two seeds over many comparisons the t-interval alone reaches far beyond it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from scipy import stats as sp

ALPHA = 0.05
LEVEL = 0.95
# a difference of two top-1 fractions lies in [-1, 1]: an interval is cut to that range, which keeps its coverage
BOUND = 1.0


def bounded(low: float, high: float) -> tuple[float, float]:
    return max(low, -BOUND), min(high, BOUND)


def mean(values: Iterable[float]) -> float:
    """The mean, exactly rounded (``math.fsum``): a page's number does not depend on the order its record lists runs."""
    values = list(values)
    return math.fsum(values) / len(values)


def mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval over the values; low = high = mean for a single value."""
    n = len(values)
    m = math.fsum(values) / n  # exactly rounded: a page's mean does not depend on the order its records list runs
    if n < 2:
        return m, m, m
    sd = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))
    h = sp.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return m, m - h, m + h


@dataclass(frozen=True)
class Difference:
    """a - b over runs: the mean difference, its interval, the p-value (two-sided) and, once a page's comparisons are
    corrected together, the Holm-adjusted p-value and an interval widened to hold for all of them at once (``level``,
    Bonferroni). ``kind`` says which test: paired t over matched runs, or Welch's t over independent ones; ``se`` and
    ``dof`` are its standard error and degrees of freedom, which the widening needs."""

    diff: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    kind: str
    se: float
    dof: float
    p_holm: float | None = None
    level: float = LEVEL

    @property
    def verdict(self) -> str:
        """above / below / not separated, by the Holm-adjusted p-value (the raw one until corrected)."""
        p = self.p if self.p_holm is None else self.p_holm
        if p >= ALPHA or self.diff == 0:
            return "not separated"
        return "above" if self.diff > 0 else "below"


def paired(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Difference:
    """a - b where a[i] and b[i] come from the same run or seed (the same checkpoint under two methods, the same seed
    under two schemes): a paired t interval over the differences."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a paired difference needs two or more matched pairs, got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b, strict=True)]
    m, lo, hi = mean_ci(d, level)
    n = len(d)
    if all(v == d[0] for v in d):  # no spread: the interval is the point, and the test is decided by the sign
        return Difference(m, m, m, 1.0 if m == 0 else 0.0, n, n, "paired t", 0.0, n - 1, level=level)
    se = math.sqrt(math.fsum((v - m) ** 2 for v in d) / (n - 1) / n)
    p = float(sp.ttest_rel(a, b).pvalue)
    return Difference(m, *bounded(lo, hi), p, n, n, "paired t", se, n - 1, level=level)


def welch(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Difference:
    """a - b over independent runs: Welch's t interval (unequal variances)."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a difference between means needs two or more runs on each side, got {len(a)} and {len(b)}")
    ma, mb = math.fsum(a) / len(a), math.fsum(b) / len(b)
    va = math.fsum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = math.fsum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    d = ma - mb
    if va + vb == 0:
        return Difference(d, d, d, 1.0 if d == 0 else 0.0, len(a), len(b), "Welch t", 0.0, 1.0, level=level)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    h = sp.t.ppf(0.5 + level / 2, dof) * math.sqrt(va + vb)
    p = float(sp.ttest_ind(a, b, equal_var=False).pvalue)
    return Difference(d, *bounded(d - h, d + h), p, len(a), len(b), "Welch t", math.sqrt(va + vb), dof, level=level)


def holm(diffs: Sequence[Difference]) -> list[Difference]:
    """The differences with ``p_holm`` set, Holm's step-down adjustment over all of them (one page's family), and
    each interval widened to Bonferroni's level 1 - ALPHA / m, so that the intervals hold together."""
    m = len(diffs)
    order = sorted(range(m), key=lambda i: diffs[i].p)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * diffs[i].p))
        adjusted[i] = running
    level = 1 - ALPHA / max(m, 1)
    q = 0.5 + level / 2
    out = []
    for d, p in zip(diffs, adjusted, strict=True):
        low, high = bounded(d.diff - sp.t.ppf(q, d.dof) * d.se, d.diff + sp.t.ppf(q, d.dof) * d.se)
        out.append(replace(d, p_holm=p, low=low, high=high, level=level))
    return out


def wilson(correct: int, total: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of one accuracy over ``total`` images (what one checkpoint's cell can say)."""
    if total == 0:
        return float("nan"), float("nan")
    z = sp.norm.ppf(0.5 + level / 2)
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half
