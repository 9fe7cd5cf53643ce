"""Confidence intervals chosen per metric unit and nesting, and paired comparisons.

Every number in a report is an `Estimate`: the point value on the full sample,
its 95% interval, the units it rests on, the clusters they are nested in and
the method's name. Units (probes, attempts, a fact's writes) are nested in
clusters (scopes): probes of one scope share a store and are not
independent, so intervals treat the cluster as the independent draw.

`interval` picks the method from the values (tested for coverage by a
simulation with known truth, tests/test_stats_coverage.py):

- values that are 0/1 on independent units (each its own cluster): the
  **Wilson** score interval, which does not collapse at 0 or 1;
- values bounded in [0, 1] otherwise (clustered proportions, nDCG, pooled
  shares such as budget waste): **Wilson with a design effect** (Korn and
  Graubard): the effective n is p(1-p) over the cluster-robust variance of the
  pooled ratio, capped at the number of units and scaled by (z / t_{k-1})^2,
  so few clusters widen the interval;
- unbounded values (bytes, tokens, rows per fact): the **cluster-robust t**
  interval of the pooled ratio (linearised variance, k/(k-1) correction,
  t with k-1 degrees of freedom), cut at 0 for non-negative values.

A mean is the pooled ratio with denominator 1 per defined unit. Fewer than
`MIN_CLUSTERS` clusters make an interval approximate (reports say so); one
cluster gives no interval at all. `paired_interval` is the paired
cluster-robust t interval of a difference of two pooled ratios over shared
units. The percentile bootstraps below stay for quantiles (latency) and
notebooks; they resample units, so they are too narrow for clustered units.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memkit.errors import ConfigError

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
CONFIDENCE = 0.95
MIN_CLUSTERS = 10
"""Below this many clusters an interval is reported as approximate."""
BOOTSTRAP = "percentile bootstrap"
WILSON = "Wilson"
WILSON_DEFF = "Wilson, design effect"
CLUSTER_T = "cluster-robust t"
PAIRED_T = "paired cluster-robust t"
NEWCOMBE = "Newcombe hybrid (no paired spread)"
NO_INTERVAL = "no interval (1 cluster)"
UNDEFINED = "undefined (no unit defines it)"
"""n = 0: no value and no interval (e.g. dedup precision where nothing was removed);
never "1 cluster", which would claim a unit that is not there."""
NO_SPREAD = "no spread"
"""What reports show instead of an interval whose ends meet its value: every
unit (or cluster) agreed, e.g. each pass took exactly 1 attempt, so the
sample has no variation to build an interval from. A collapsed [1.000,
1.000] would read as certainty; metrics.json keeps the numbers as computed."""


def no_spread(value: float | None, lo: float | None, hi: float | None) -> bool:
    """True when an interval's (finite) ends both equal its value."""
    if value is None or lo is None or hi is None:
        return False
    return bool(math.isfinite(value) and lo == value == hi)


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
    clusters: int = 0
    """Clusters the n units are nested in (n when independent; 0 not recorded)."""
    method: str = BOOTSTRAP

    @property
    def approximate(self) -> bool:
        """Fewer than `MIN_CLUSTERS` clusters: the interval's coverage is not assured."""
        return 0 < self.clusters < MIN_CLUSTERS

    def as_dict(self, digits: int = 6) -> dict[str, float | int | str | None]:
        """JSON-safe form: NaN becomes None, floats rounded for stable files."""
        return {
            "value": _round(self.value, digits),
            "lo": _round(self.lo, digits),
            "hi": _round(self.hi, digits),
            "n": int(self.n),
            "clusters": int(self.clusters),
            "method": self.method,
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


# --- intervals per unit and nesting ------------------------------------------------


@functools.cache
def _z() -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + CONFIDENCE / 2))


@functools.cache
def _t(df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + CONFIDENCE / 2, df))


def wilson(p: float, n: float, z: float | None = None) -> tuple[float, float]:
    """Wilson score interval of a proportion p observed on n (effective) trials."""
    z = _z() if z is None else z
    d = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / d
    lo = 0.0 if p <= 0 else max(0.0, centre - half)
    hi = 1.0 if p >= 1 else min(1.0, centre + half)
    return lo, hi


@dataclass(frozen=True, slots=True)
class _Sample:
    """Defined units of one metric, summed per cluster."""

    y: np.ndarray
    """per-unit numerators"""
    d: np.ndarray
    """per-unit denominators (1 for a mean)"""
    codes: np.ndarray
    """per-unit cluster index"""
    k: int

    @property
    def value(self) -> float:
        return float(self.y.sum() / self.d.sum())

    def totals(self) -> tuple[np.ndarray, np.ndarray]:
        yc = np.bincount(self.codes, weights=self.y, minlength=self.k)
        dc = np.bincount(self.codes, weights=self.d, minlength=self.k)
        return yc, dc


def _sample(
    nums: Sequence[float] | np.ndarray,
    dens: Sequence[float] | np.ndarray | None,
    clusters: Sequence[object] | None,
    keep_also: np.ndarray | None = None,
) -> _Sample:
    y = np.asarray(nums, dtype=float).ravel()
    d = np.ones_like(y) if dens is None else np.asarray(dens, dtype=float).ravel()
    if d.shape != y.shape:
        raise ConfigError(f"interval needs aligned arrays, got {y.shape} and {d.shape}")
    if clusters is not None and len(clusters) != y.size:
        raise ConfigError(f"{y.size} units but {len(clusters)} cluster keys")
    keep = ~(np.isnan(y) | np.isnan(d)) & (d > 0)
    if keep_also is not None:
        keep &= keep_also
    if clusters is None:
        keys = np.arange(y.size)
    else:
        keys = np.asarray([str(c) for c in clusters], dtype=object)
    _, codes = np.unique(keys[keep].astype(str), return_inverse=True)
    return _Sample(
        y[keep], d[keep], codes.astype(np.intp), int(codes.max()) + 1 if codes.size else 0
    )


def _ratio_variance(s: _Sample) -> float:
    """Cluster-robust (linearised, k/(k-1)) variance of the pooled ratio."""
    yc, dc = s.totals()
    r = s.value
    return float(s.k / (s.k - 1) * np.sum((yc - r * dc) ** 2) / s.d.sum() ** 2)


def interval(
    nums: Sequence[float] | np.ndarray,
    dens: Sequence[float] | np.ndarray | None = None,
    clusters: Sequence[object] | None = None,
    *,
    bounded: bool | None = None,
) -> Estimate:
    """The pooled value sum(nums)/sum(dens) (a mean when `dens` is None) with the
    95% interval the module docstring picks for these values and nesting.

    Units with a NaN value or a zero denominator are undefined and left out;
    `clusters[i]` names the cluster of unit i (None: every unit independent).
    `bounded` says whether the metric is a share in [0, 1] (False: counts,
    bytes, tokens get the t interval even when every value happens to be 0 or
    1); None judges from the values.
    """
    s = _sample(nums, dens, clusters)
    n = int(s.y.size)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, 0, UNDEFINED)
    value = s.value
    if s.k < 2:
        return Estimate(value, math.nan, math.nan, n, s.k, NO_INTERVAL)
    var = _ratio_variance(s)
    in_range = bool(np.all((s.y >= 0) & (s.y <= s.d)))
    if in_range and bounded is not False:
        binary = bool(np.all(s.d == 1) and np.all((s.y == 0) | (s.y == 1)))
        z = _z()
        if binary and s.k == n:
            lo, hi = wilson(value, n, z)
            return Estimate(value, lo, hi, n, s.k, WILSON)
        pq = value * (1 - value)
        n_eff = float(n) if var == 0 or pq == 0 else min(float(n), pq / var)
        n_eff *= (z / _t(s.k - 1)) ** 2
        lo, hi = wilson(value, n_eff, z)
        return Estimate(value, lo, hi, n, s.k, WILSON_DEFF)
    half = _t(s.k - 1) * math.sqrt(var)
    lo = value - half
    if np.all(s.y >= 0):
        lo = max(lo, 0.0)  # a non-negative quantity (bytes, tokens) has no negative mean
    return Estimate(value, lo, value + half, n, s.k, CLUSTER_T)


def paired_interval(
    num_a: Sequence[float] | np.ndarray,
    den_a: Sequence[float] | np.ndarray | None,
    num_b: Sequence[float] | np.ndarray,
    den_b: Sequence[float] | np.ndarray | None,
    clusters: Sequence[object] | None = None,
    *,
    bounded: bool | None = None,
) -> Estimate:
    """Difference a - b of two pooled ratios over the same units, paired.

    `num_a[i]` and `num_b[i]` are unit i under two systems; only units defined
    on both sides (finite value, positive denominator) are pairs, and `n` is
    their number. The interval is the cluster-robust t of the linearised
    difference, so variance the two systems share cancels; when the paired
    spread is exactly 0 (e.g. both systems at 1.0 everywhere) a share falls
    back to Newcombe's hybrid of the two Wilson intervals rather than
    collapsing. `bounded` is `interval`'s: a metric that is not a share
    (tokens, bytes) has no Wilson interval, so its spread-free difference is
    reported as it is (NO_SPREAD).
    """
    ya, yb = (np.asarray(v, dtype=float).ravel() for v in (num_a, num_b))
    da = np.ones_like(ya) if den_a is None else np.asarray(den_a, dtype=float).ravel()
    db = np.ones_like(yb) if den_b is None else np.asarray(den_b, dtype=float).ravel()
    if len({ya.shape, yb.shape, da.shape, db.shape}) != 1:
        raise ConfigError("a paired interval needs four aligned arrays")
    both = ~(np.isnan(ya) | np.isnan(da) | np.isnan(yb) | np.isnan(db)) & (da > 0) & (db > 0)
    a = _sample(ya, da, clusters, both)
    b = _sample(yb, db, clusters, both)
    n = int(a.y.size)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, 0, UNDEFINED)
    diff = a.value - b.value
    if a.k < 2:
        return Estimate(diff, math.nan, math.nan, n, a.k, NO_INTERVAL)
    yca, dca = a.totals()
    ycb, dcb = b.totals()
    z = (yca - a.value * dca) / a.d.sum() - (ycb - b.value * dcb) / b.d.sum()
    var = float(a.k / (a.k - 1) * np.sum(z**2))
    if var > 0:
        half = _t(a.k - 1) * math.sqrt(var)
        return Estimate(diff, diff - half, diff + half, n, a.k, PAIRED_T)
    ea = interval(a.y, a.d, a.codes, bounded=bounded)
    eb = interval(b.y, b.d, b.codes, bounded=bounded)
    if CLUSTER_T in (ea.method, eb.method):  # not a share (told, or by its values)
        return Estimate(diff, diff, diff, n, a.k, NO_SPREAD)
    if math.isnan(ea.lo) or math.isnan(eb.lo):
        return Estimate(diff, diff, diff, n, a.k, PAIRED_T)
    lo = diff - math.hypot(ea.value - ea.lo, eb.hi - eb.value)
    hi = diff + math.hypot(ea.hi - ea.value, eb.value - eb.lo)
    return Estimate(diff, lo, hi, n, a.k, NEWCOMBE)
