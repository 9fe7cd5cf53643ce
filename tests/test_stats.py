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
    assert NA.as_dict() == {"value": None, "lo": None, "hi": None, "n": 0}


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
    }
