"""Bootstrap CIs: determinism, coverage of the point value, NaN handling, pairing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.stats import (
    NA,
    Estimate,
    bootstrap_mean,
    bootstrap_quantile,
    bootstrap_ratio,
    paired_difference,
    paired_ratio_difference,
)
from memkit.errors import ConfigError


def test_mean_is_exact_and_interval_brackets_it():
    e = bootstrap_mean([0.0, 1.0, 1.0, 1.0])
    assert e.value == 0.75 and e.n == 4
    assert 0.0 <= e.lo <= 0.75 <= e.hi <= 1.0


def test_same_seed_same_interval_other_seed_differs():
    x = np.random.default_rng(1).normal(size=50)
    assert bootstrap_mean(x, seed=3) == bootstrap_mean(x, seed=3)
    assert bootstrap_mean(x, seed=3) != bootstrap_mean(x, seed=4)


def test_nan_units_are_dropped_not_zeroed():
    e = bootstrap_mean([1.0, math.nan, 1.0])
    assert (e.value, e.lo, e.hi, e.n) == (1.0, 1.0, 1.0, 2)


def test_empty_and_all_nan_are_na():
    assert bootstrap_mean([]) is NA
    assert bootstrap_mean([math.nan]) is NA
    assert NA.fmt() == "n/a"
    assert NA.as_dict() == {
        "value": None,
        "lo": None,
        "hi": None,
        "n": 0,
        "clusters": 0,
        "method": "percentile bootstrap",
    }


def test_single_value_has_degenerate_interval():
    assert bootstrap_mean([0.3]) == Estimate(0.3, 0.3, 0.3, 1)


def test_constant_sample_has_zero_width():
    e = bootstrap_mean([2.0] * 10)
    assert e.lo == e.hi == 2.0


def test_interval_narrows_with_more_units():
    rng = np.random.default_rng(0)
    small = bootstrap_mean(rng.integers(0, 2, 20))
    large = bootstrap_mean(rng.integers(0, 2, 2000))
    assert (large.hi - large.lo) < (small.hi - small.lo)


def test_ratio_pools_sums_not_means():
    # per-unit ratios 1/1 and 0/3: mean of ratios 0.5, pooled ratio 0.25
    e = bootstrap_ratio([1, 0], [1, 3])
    assert e.value == 0.25 and e.n == 2
    assert 0.0 <= e.lo <= e.hi <= 1.0


def test_ratio_zero_denominator_is_nan():
    e = bootstrap_ratio([0, 0], [0, 0])
    assert math.isnan(e.value) and e.n == 0


def test_ratio_rejects_misaligned():
    with pytest.raises(ConfigError, match="aligned"):
        bootstrap_ratio([1, 2], [1])


def test_quantile_median_and_p95():
    x = np.arange(1, 101, dtype=float)
    assert bootstrap_quantile(x, 0.5).value == pytest.approx(50.5)
    assert bootstrap_quantile(x, 0.95).value == pytest.approx(95.05)
    with pytest.raises(ConfigError, match=r"1\.5"):
        bootstrap_quantile(x, 1.5)


def test_paired_difference_cancels_shared_variance():
    rng = np.random.default_rng(2)
    base = rng.normal(0, 10, 200)  # huge between-unit variance
    a, b = base + 1.0, base
    d = paired_difference(a, b)
    assert d.value == pytest.approx(1.0)
    assert d.lo == pytest.approx(1.0) and d.hi == pytest.approx(1.0)
    # unpaired intervals overlap heavily, the paired one excludes 0
    ea, eb = bootstrap_mean(a), bootstrap_mean(b)
    assert ea.lo < eb.hi and d.lo > 0


def test_paired_difference_rejects_misaligned():
    with pytest.raises(ConfigError, match="aligned"):
        paired_difference([1, 2, 3], [1, 2])


def test_paired_ratio_difference():
    d = paired_ratio_difference([1, 1], [1, 1], [0, 1], [1, 1])
    assert d.value == 0.5 and d.n == 2
    assert 0.0 <= d.lo <= d.hi <= 1.0


def test_resamples_bound():
    with pytest.raises(ConfigError, match="0"):
        bootstrap_mean([1, 2], resamples=0)
    assert bootstrap_mean([1, 2], resamples=1).n == 2


def test_as_dict_rounds_for_stable_files():
    assert Estimate(1 / 3, 0.1, 0.9, 3).as_dict(4) == {
        "value": 0.3333,
        "lo": 0.1,
        "hi": 0.9,
        "n": 3,
        "clusters": 0,
        "method": "percentile bootstrap",
    }


# --- intervals per unit and nesting (issue #19) ----------------------------------


def test_proportions_at_0_and_1_do_not_collapse():
    from evals.stats import WILSON, interval

    zero, one = interval([0.0] * 50), interval([1.0] * 50)
    assert (zero.value, zero.lo, zero.method) == (0.0, 0.0, WILSON) and zero.hi > 0.05
    assert (one.value, one.hi) == (1.0, 1.0) and one.lo < 0.95
    assert zero.n == 50 and zero.clusters == 50 and not zero.approximate


def test_one_cluster_gives_no_interval_and_few_clusters_are_approximate():
    from evals.stats import NO_INTERVAL, UNDEFINED, WILSON_DEFF, interval, paired_interval

    # the audit's dedup_precision 0 [0, 0] n=5: five removals of one fact pair
    e = interval([0, 0, 0, 0, 0], [1, 1, 1, 1, 1], ["s1"] * 5)
    assert e.value == 0.0 and math.isnan(e.lo) and e.method == NO_INTERVAL
    assert (e.n, e.clusters) == (5, 1)
    none = interval([math.nan, math.nan], None, ["s1", "s2"])  # defined on no unit
    assert (none.n, none.clusters, none.method) == (0, 0, UNDEFINED) and math.isnan(none.value)
    assert paired_interval([math.nan], None, [1.0], None).method == UNDEFINED
    e = interval([0, 0, 0], [2, 1, 3], ["a", "b", "c"])  # pooled share at 0
    assert e.lo == 0.0 and e.hi > 0 and e.method == WILSON_DEFF and e.approximate


def test_clusters_widen_the_interval_of_correlated_units():
    from evals.stats import interval

    # 8 scopes of 30 probes, all-or-nothing within a scope: 8 draws, not 240
    values = [float(i % 2) for i in range(8) for _ in range(30)]
    scopes = [i for i in range(8) for _ in range(30)]
    flat, nested = interval(values), interval(values, None, scopes)
    assert flat.value == nested.value == 0.5
    assert (nested.hi - nested.lo) > 3 * (flat.hi - flat.lo)
    assert nested.clusters == 8 and nested.approximate


def test_unbounded_values_use_the_cluster_t():
    from evals.stats import CLUSTER_T, LOG_T, interval

    half = 3.182446 * math.sqrt(4 / 3 * 500 / 16)
    e = interval([10.0, 20.0, 30.0, 40.0])
    # non-negative: the t interval on the log scale, above 0 by construction
    assert e.method == LOG_T and e.value == 25.0
    assert e.lo == pytest.approx(25 / math.exp(half / 25), abs=1e-4)
    assert e.hi == pytest.approx(25 * math.exp(half / 25), abs=1e-4)
    # values of either sign (a signed difference) keep the plain t
    s = interval([-10.0, 20.0, 30.0, 60.0])
    assert s.method == CLUSTER_T and s.value == 25.0
    assert s.lo == pytest.approx(25 - 3.182446 * math.sqrt(4 / 3 * 2500 / 16), abs=1e-4)


def test_a_count_interval_never_goes_below_zero_by_construction():
    """#32 finding 4 (counts): the t interval was cut at 0 after the fact; a mean of
    rare non-negative counts now has a positive lower end without clipping."""
    from evals.stats import interval

    e = interval([0.0] * 30 + [40.0], None, list(range(31)))
    assert 0 < e.lo < e.value < e.hi


def test_paired_interval_pairs_only_units_defined_on_both_sides():
    from evals.stats import MOVER, PAIRED_T, paired_interval

    a = [1.0, 0.0, 1.0, math.nan, 1.0, 1.0]
    b = [0.0, 0.0, math.nan, 1.0, 0.0, 1.0]
    e = paired_interval(a, None, b, None, ["s1", "s1", "s2", "s2", "s3", "s4"])
    assert e.n == 4 and e.clusters == 3  # units 3 and 4 are undefined on one side
    assert e.value == pytest.approx(3 / 4 - 1 / 4) and e.method == MOVER
    same = paired_interval([1.0] * 40, None, [1.0] * 40, None)
    assert same.value == 0.0 and same.lo < 0 < same.hi  # no spread: MOVER, not [0, 0]
    tokens = paired_interval([5.0, 7.0, 9.0], None, [1.0, 1.0, 2.0], None, bounded=False)
    assert tokens.method == PAIRED_T and tokens.lo < tokens.value == pytest.approx(7 - 4 / 3)


def test_a_spread_free_difference_of_counts_is_no_spread_not_a_wilson_interval():
    """Tokens per pass 0 (heuristic) against 30 (a model) in every pair: the
    Newcombe fallback is for shares; on a count it made [-30.000, -29.589]
    out of the Wilson interval of an all-zero "proportion"."""
    from evals.stats import MOVER, NO_SPREAD, paired_interval

    zeros, thirties = [0.0] * 8, [30.0] * 8
    codes = [f"s{i}" for i in range(8)]
    for bounded in (False, None):  # told, or judged from the values
        e = paired_interval(zeros, None, thirties, None, codes, bounded=bounded)
        assert (e.value, e.lo, e.hi, e.method) == (-30.0, -30.0, -30.0, NO_SPREAD)
    share = paired_interval([0.0] * 8, None, [1.0] * 8, None, codes, bounded=True)
    assert share.method == MOVER and share.value == -1.0 < share.hi < 0  # not collapsed
    assert share.lo == -1.0  # the ends stay in [-1, 1]


def test_a_spread_free_share_difference_counts_scored_units_not_scopes():
    """#32 finding 3: 130 valid attempts each side in 8 scopes were 8 trials,
    0.000 [-0.411, 0.411]; with the attempts as trials the interval is narrow, and
    all-valid against none-valid is near [0.95, 1], not [0.418, 1]."""
    from evals.stats import MOVER, paired_interval

    codes = [f"s{i}" for i in range(8)]
    per = [16.0, 16, 16, 16, 16, 16, 17, 17]  # 130 attempts
    same = paired_interval(per, per, per, per, codes, trials_a=per, trials_b=per)
    assert same.method == MOVER and -0.05 < same.lo < 0 < same.hi < 0.05
    old = paired_interval(per, per, per, per, codes)  # rows as trials: 8 of them
    assert old.hi > 0.3
    gap = paired_interval(per, per, [0.0] * 8, per, codes, trials_a=per, trials_b=per)
    assert gap.value == 1.0 == gap.hi and 0.93 < gap.lo < 1.0


def test_a_paired_share_difference_stays_within_minus_one_and_one():
    """#32 finding 4: valid_after_repair's difference was 0.994 [0.979, 1.0085] (the
    paired t); the MOVER interval's ends stay in [-1, 1] by construction."""
    from evals.stats import paired_interval

    rng = np.random.default_rng(3)
    codes = np.repeat(np.arange(8), 20)
    a = (rng.random(160) < 0.995).astype(float)
    a[:2] = 0.0
    b = np.zeros(160)
    b[5] = 1.0
    e = paired_interval(a, None, b, None, codes)
    assert -1.0 <= e.lo < e.value < e.hi <= 1.0
