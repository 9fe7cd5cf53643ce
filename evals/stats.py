"""Bootstrap confidence intervals and paired comparisons.

Every number in a report is an `Estimate`: the point value on the full sample
plus a percentile-bootstrap 95% interval. Resampling is vectorised (one
`(B, n)` index matrix) and driven by a seeded `numpy.random.Generator`, so the
same inputs and seed always give the same interval, bit for bit.

Units are what gets resampled: probes, attempts, facts. A ratio metric pooled
over units (e.g. dedup precision = removed true duplicates / removed) is
resampled as a ratio of sums over the same resampled units, never as a mean
of per-unit ratios. A comparison between two systems on the same units is a
*paired* bootstrap of the per-unit difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memkit.errors import ConfigError

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point value with its 95% CI and the number of units it rests on.

    `value`, `lo` and `hi` are NaN when the metric is undefined on the sample
    (e.g. precision of an empty list, recall with no relevant facts); reports
    show that as "n/a".
    """

    value: float
    lo: float
    hi: float
    n: int

    def as_dict(self, digits: int = 6) -> dict[str, float | int | None]:
        """JSON-safe form: NaN becomes None, floats rounded for stable files."""
        return {
            "value": _round(self.value, digits),
            "lo": _round(self.lo, digits),
            "hi": _round(self.hi, digits),
            "n": int(self.n),
        }

    def fmt(self, digits: int = 3) -> str:
        if math.isnan(self.value):
            return "n/a"
        return f"{self.value:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


NA = Estimate(math.nan, math.nan, math.nan, 0)


def _round(x: float, digits: int) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), digits)


def _check(resamples: int) -> None:
    if resamples < 1:
        raise ConfigError(f"bootstrap resamples must be >= 1, got {resamples!r}")


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(values, dtype=float).ravel()
    return a[~np.isnan(a)]


def _interval(samples: np.ndarray) -> tuple[float, float]:
    alpha = (1.0 - CONFIDENCE) / 2.0
    s = samples[~np.isnan(samples)]
    if s.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(s, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _indices(n: int, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(resamples, n))


def bootstrap_mean(
    values: Sequence[float] | np.ndarray,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Estimate:
    """Mean of the defined (non-NaN) values with a percentile-bootstrap 95% CI.

    NaN marks a unit where the metric is undefined; it is dropped, not counted
    as zero. No defined value gives `NA`.
    """
    _check(resamples)
    a = _finite(values)
    if a.size == 0:
        return NA
    value = float(a.mean())
    if a.size == 1:
        return Estimate(value, value, value, 1)
    means = a[_indices(a.size, resamples, seed)].mean(axis=1)
    lo, hi = _interval(means)
    return Estimate(value, lo, hi, int(a.size))


def bootstrap_ratio(
    numerators: Sequence[float] | np.ndarray,
    denominators: Sequence[float] | np.ndarray,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Estimate:
    """Pooled ratio sum(num)/sum(den) over units, resampling units.

    `n` is the number of units with a positive denominator; the value is NaN
    when the pooled denominator is 0 (e.g. dedup precision when nothing was
    removed). Resamples whose denominator is 0 are dropped from the interval.
    """
    _check(resamples)
    num = np.asarray(numerators, dtype=float).ravel()
    den = np.asarray(denominators, dtype=float).ravel()
    if num.shape != den.shape:
        raise ConfigError(f"ratio needs aligned arrays, got {num.shape} and {den.shape}")
    keep = ~(np.isnan(num) | np.isnan(den))
    num, den = num[keep], den[keep]
    total = den.sum() if den.size else 0.0
    if den.size == 0 or total == 0:
        return Estimate(math.nan, math.nan, math.nan, int((den > 0).sum()))
    value = float(num.sum() / total)
    idx = _indices(den.size, resamples, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    ratios[~np.isfinite(ratios)] = np.nan
    lo, hi = _interval(ratios)
    return Estimate(value, lo, hi, int((den > 0).sum()))


def bootstrap_quantile(
    values: Sequence[float] | np.ndarray,
    q: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Estimate:
    """The q-quantile (0..1, linear interpolation) with a bootstrap 95% CI.

    Used for latency p50/p95. Percentile intervals of high quantiles on small
    samples are coarse; `n` says how coarse.
    """
    _check(resamples)
    if not 0.0 <= q <= 1.0:
        raise ConfigError(f"quantile must be in [0, 1], got {q!r}")
    a = _finite(values)
    if a.size == 0:
        return NA
    value = float(np.quantile(a, q))
    if a.size == 1:
        return Estimate(value, value, value, 1)
    qs = np.quantile(a[_indices(a.size, resamples, seed)], q, axis=1)
    lo, hi = _interval(qs)
    return Estimate(value, lo, hi, int(a.size))


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Estimate:
    """Mean of a - b over shared units with a paired bootstrap 95% CI.

    `a[i]` and `b[i]` must be the same unit (same probe, same pass) under two
    systems. Units where either side is NaN are dropped from both. The
    interval resamples units, so the between-unit variance the two systems
    share cancels: a CI excluding 0 is a real difference on these units.
    """
    x = np.asarray(a, dtype=float).ravel()
    y = np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise ConfigError(f"paired difference needs aligned units, got {x.size} and {y.size}")
    return bootstrap_mean(x - y, resamples=resamples, seed=seed)


def paired_ratio_difference(
    num_a: Sequence[float] | np.ndarray,
    den_a: Sequence[float] | np.ndarray,
    num_b: Sequence[float] | np.ndarray,
    den_b: Sequence[float] | np.ndarray,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Estimate:
    """Difference of two pooled ratios over the same units, paired bootstrap CI."""
    _check(resamples)
    arrs = [np.asarray(v, dtype=float).ravel() for v in (num_a, den_a, num_b, den_b)]
    if len({v.shape for v in arrs}) != 1:
        raise ConfigError("paired ratio difference needs four aligned arrays")
    na, da, nb, db = arrs
    n = na.size
    if n == 0 or da.sum() == 0 or db.sum() == 0:
        return Estimate(math.nan, math.nan, math.nan, n)
    value = float(na.sum() / da.sum() - nb.sum() / db.sum())
    idx = _indices(n, resamples, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        diffs = na[idx].sum(1) / da[idx].sum(1) - nb[idx].sum(1) / db[idx].sum(1)
    diffs[~np.isfinite(diffs)] = np.nan
    lo, hi = _interval(diffs)
    return Estimate(value, lo, hi, n)
