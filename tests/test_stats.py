"""The pages' statistics, pinned against scipy's own intervals and against Holm's definition."""

from __future__ import annotations

import random

import pytest
from scipy import stats as sp

from benchmarks import stats

A = [0.91, 0.94, 0.90, 0.93, 0.95]
B = [0.88, 0.93, 0.86, 0.92, 0.90]


def test_mean_ci_is_students_t_interval():
    m, lo, hi = stats.mean_ci(A)
    ref = sp.ttest_1samp(A, 0).confidence_interval(0.95)
    assert m == pytest.approx(sum(A) / 5) and (lo, hi) == pytest.approx((ref.low, ref.high))
    assert stats.mean_ci([0.5]) == (0.5, 0.5, 0.5)


def test_a_mean_and_its_interval_do_not_depend_on_the_order_the_runs_are_listed():
    # five test top-1 whose plain float sum rounds to 47.8 % in one order and 47.9 % in another
    top1 = [0.524, 0.497, 0.4845, 0.4925, 0.3945]
    orders = [top1, top1[::-1], sorted(top1), [top1[i] for i in (2, 0, 4, 1, 3)]]
    assert len({sum(o) for o in orders}) > 1  # the plain sum does depend on it
    assert len({stats.mean_ci(o) for o in orders}) == 1
    assert len({f"{100 * stats.mean_ci(o)[0]:.1f}" for o in orders}) == 1
    assert len({stats.welch(o, B).diff for o in orders}) == 1


def test_paired_difference_matches_scipy_and_is_narrower_than_welch_on_correlated_runs():
    d = stats.paired(A, B)
    ref = sp.ttest_rel(A, B)
    ci = ref.confidence_interval(0.95)
    assert (d.diff, d.low, d.high, d.p) == pytest.approx((sum(A) / 5 - sum(B) / 5, ci.low, ci.high, ref.pvalue))
    w = stats.welch(A, B)
    wref = sp.ttest_ind(A, B, equal_var=False)
    wci = wref.confidence_interval(0.95)
    assert (w.low, w.high, w.p) == pytest.approx((wci.low, wci.high, wref.pvalue))
    assert d.high - d.low < w.high - w.low  # pairing removes the seed-to-seed spread both share
    assert d.kind == "paired t" and w.kind == "Welch t"


def test_a_single_run_is_never_compared_with_a_mean():
    with pytest.raises(ValueError, match="two or more"):
        stats.welch([0.9], B)
    with pytest.raises(ValueError, match="two or more"):
        stats.paired([0.9], [0.8])
    with pytest.raises(ValueError, match="matched"):
        stats.paired(A, B[:4])


def test_holm_adjusts_step_down_and_never_below_the_raw_p():
    ps = [0.01, 0.04, 0.03, 0.005]
    diffs = [stats.Difference(1.0, 0.5, 1.5, p, 3, 3, "paired t", 0.1, 2) for p in ps]
    adjusted = [d.p_holm for d in stats.holm(diffs)]
    # sorted p: .005 (x4 = .02), .01 (x3 = .03), .03 (x2 = .06), .04 (x1 = .04 -> kept monotone at .06)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = random.Random(0)
    many = [stats.Difference(1.0, 0, 2, rng.random(), 3, 3, "paired t", 0.2, 2) for _ in range(20)]
    for raw, adj in zip(many, stats.holm(many), strict=True):
        assert raw.p <= adj.p_holm <= 1


def test_corrected_intervals_are_bonferronis_and_never_contradict_the_verdict():
    """After the correction, an interval that excludes zero is always separated (never "+0.5 [+0.1, +1.0], not
    separated"), and it is the t-interval at level 1 - 0.05 / m around the same mean."""
    rng = random.Random(1)
    shifts = (0, 0.5, 1, 1.5, 3) * 2
    pairs = [([rng.gauss(0.5 + s / 10, 0.1) for _ in range(5)], [rng.gauss(0.5, 0.1) for _ in range(5)])
             for s in shifts]  # fmt: skip
    raw = [stats.paired(a, b) for a, b in pairs]
    corrected = stats.holm(raw)
    assert len({d.verdict for d in corrected}) > 1  # the family mixes separated and not
    for r, c, (a, b) in zip(raw, corrected, pairs, strict=True):
        assert c.low <= r.low <= r.diff <= r.high <= c.high
        assert c.level == pytest.approx(1 - 0.05 / len(pairs))
        wide = stats.paired(a, b, level=c.level)
        assert (c.low, c.high) == pytest.approx((wide.low, wide.high))
        if c.low > 0 or c.high < 0:
            assert c.verdict != "not separated"
    a, b = [0.1, 0.2, 0.3], [0, 0.05, 0.07, 0.02]
    w = stats.holm([stats.welch(a, b), stats.welch([0.1, 0.2], [0.2, 0.3])])[0]
    assert (w.low, w.high) == pytest.approx((stats.welch(a, b, w.level).low, stats.welch(a, b, w.level).high))


def test_verdict_follows_the_corrected_p_and_the_sign():
    d = stats.Difference(2.0, 0.1, 3.9, 0.01, 5, 5, "paired t", 0.7, 4)
    assert d.verdict == "above"
    assert stats.Difference(-2.0, -3.9, -0.1, 0.01, 5, 5, "paired t", 0.7, 4).verdict == "below"
    corrected = stats.holm([d] * 10)[0]  # ten such comparisons: .01 x 10 = .1
    assert corrected.verdict == "not separated"


def test_wilson_interval_contains_the_rate_and_narrows_with_more_images():
    lo, hi = stats.wilson(90, 100)
    assert lo < 0.9 < hi
    lo2, hi2 = stats.wilson(900, 1000)
    assert hi2 - lo2 < hi - lo
    assert stats.wilson(0, 10)[0] == pytest.approx(0, abs=1e-12)


def test_intervals_are_cut_to_the_range_a_difference_of_top1_can_take():
    wild = stats.paired([0.9, 0.1], [0.1, 0.9])  # two seeds that disagree: t with one degree of freedom
    raw = stats.mean_ci([0.8, -0.8])
    assert raw[1] < -1 and raw[2] > 1 and (wild.low, wild.high) == (-1.0, 1.0)
    (widened,) = stats.holm([stats.paired([0.9, 0.8], [0.25, 0.25])])  # +0.65, +0.55: its t reaches past +1 only
    assert widened.high == 1.0 and -1.0 < widened.low < widened.diff
    calm = stats.paired([0.9, 0.91, 0.92], [0.8, 0.81, 0.83])
    assert (calm.low, calm.high) == pytest.approx(stats.mean_ci([0.1, 0.1, 0.09])[1:])  # within the range: untouched
    assert stats.welch([0.9, 0.1], [0.5, 0.5]).low == -1.0
