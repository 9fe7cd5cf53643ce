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
  pooled ratio, capped at the scored units (attempts, probes; never the
  clusters) and scaled by (z / t_{k-1})^2, so few clusters widen the interval;
- non-negative unbounded values (bytes, tokens, rows per fact): the
  **cluster-robust t** of the pooled ratio (linearised variance, k/(k-1)
  correction, t with k-1 degrees of freedom) on the **log scale**, above 0 by
  construction; values of either sign get it on the plain scale.

Every interval lies in its metric's range by construction: a share in
[0, 1], a difference of shares in [-1, 1] (`paired_interval`: MOVER), a
count >= 0. A mean is the pooled ratio with denominator 1 per defined unit.
Fewer than `MIN_CLUSTERS` clusters, or a clustered share within `EDGE_SHARE`
of 0 or 1, make an interval approximate (reports mark it ≈; the simulated
coverage of those regimes is in docs/coverage.md); one cluster gives no
interval at all. The percentile bootstraps below stay for quantiles (latency)
and notebooks; they resample units, so they are too narrow for clustered units.
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
LOG_T = "cluster-robust t, log scale"
PAIRED_T = "paired cluster-robust t"
MOVER = "paired MOVER (Wilson, design effect)"
NO_INTERVAL = "no interval (1 cluster)"
UNDEFINED = "undefined (no unit defines it)"
"""n = 0: no value and no interval (e.g. dedup precision where nothing was removed);
never "1 cluster", which would claim a unit that is not there."""
NO_SPREAD = "no spread"
"""What reports show instead of an interval whose ends meet its value: every
unit (or cluster) agreed, e.g. each pass took exactly 1 attempt, so the
sample has no variation to build an interval from. A collapsed [1.000,
1.000] would read as certainty; metrics.json keeps the numbers as computed."""


EDGE_SHARE = 0.1
"""A clustered share below this or above 1 - this is approximate even over many clusters."""
WORST_COVERAGE = 0.834
"""The lowest coverage the simulation measured for an approximate interval
(docs/coverage.md; tests/test_stats_coverage.py checks it)."""


def approximate(method: str | None, value: float | None, clusters: int | None) -> bool:
    """Whether an interval is approximate: fewer than `MIN_CLUSTERS` clusters, or a
    clustered share (design effect) within `EDGE_SHARE` of 0 or 1, where the
    simulated coverage fell to 0.91 even over 50 clusters (docs/coverage.md)."""
    k = 0 if clusters is None or clusters != clusters else int(clusters)
    if 0 < k < MIN_CLUSTERS:
        return True
    edge = value is not None and value == value and not EDGE_SHARE <= value <= 1 - EDGE_SHARE
    return bool(method == WILSON_DEFF and edge)


def no_spread(value: float | None, lo: float | None, hi: float | None) -> bool:
    """True when an interval's (finite) ends both equal its value."""
    if value is None or lo is None or hi is None:
        return False
    return bool(math.isfinite(value) and lo == value == hi)


def fmt_interval(value: float | None, lo: float | None, hi: float | None, digits: int = 3) -> str:
    """ "v [lo, hi]" as every table prints it: "n/a" with no value, the value alone
    with no interval, "v [no spread]" when the ends meet it (never a collapsed one)."""
    if value is None or math.isnan(value):
        return "n/a"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{value:.{digits}f}"
    if no_spread(value, lo, hi):
        return f"{value:.{digits}f} [{NO_SPREAD}]"
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


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
        """The interval's coverage is not assured (`approximate`)."""
        return approximate(self.method, self.value, self.clusters)

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
        return fmt_interval(self.value, self.lo, self.hi, digits)


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
    clusters: Sequence[object] | np.ndarray | None,
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
    clusters: Sequence[object] | np.ndarray | None = None,
    *,
    bounded: bool | None = None,
    trials: Sequence[float] | np.ndarray | None = None,
) -> Estimate:
    """The pooled value sum(nums)/sum(dens) (a mean when `dens` is None) with the
    95% interval the module docstring picks for these values and nesting.

    Units with a NaN value or a zero denominator are undefined and left out;
    `clusters[i]` names the cluster of unit i (None: every unit independent).
    `bounded` says whether the metric is a share in [0, 1] (False: counts,
    bytes, tokens get the t interval even when every value happens to be 0 or
    1); None judges from the values. `trials[i]` is how many scored units row i
    sums (compare pairs a scope's attempts as one row): a share's effective n
    counts those, never the rows, so 8 scopes of 16 attempts are 128 trials.
    """
    s = _sample(nums, dens, clusters)
    n = int(s.y.size)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, 0, UNDEFINED)
    value = s.value
    if s.k < 2:
        return Estimate(value, math.nan, math.nan, n, s.k, NO_INTERVAL)
    var = _ratio_variance(s)
    if _is_share(s, bounded):
        binary = bool(np.all(s.d == 1) and np.all((s.y == 0) | (s.y == 1)))
        z = _z()
        if binary and s.k == n and trials is None:
            lo, hi = wilson(value, n, z)
            return Estimate(value, lo, hi, n, s.k, WILSON)
        lo, hi = wilson(value, _n_eff(s, var, _trials(nums, dens, clusters, trials)), z)
        return Estimate(value, lo, hi, n, s.k, WILSON_DEFF)
    if var == 0:
        return Estimate(value, value, value, n, s.k, NO_SPREAD)
    half = _t(s.k - 1) * math.sqrt(var)
    if value > 0 and np.all(s.y >= 0):
        # a non-negative mean (bytes, tokens): the t interval on the log scale, which
        # stays above 0 by construction and leans right as skewed counts do
        f = math.exp(half / value)
        return Estimate(value, value / f, value * f, n, s.k, LOG_T)
    return Estimate(value, value - half, value + half, n, s.k, CLUSTER_T)


def _is_share(s: _Sample, bounded: bool | None) -> bool:
    return bool(np.all((s.y >= 0) & (s.y <= s.d))) and bounded is not False


def _trials(
    nums: Sequence[float] | np.ndarray,
    dens: Sequence[float] | np.ndarray | None,
    clusters: Sequence[object] | np.ndarray | None,
    trials: Sequence[float] | np.ndarray | None,
) -> float | None:
    """Scored units behind the defined rows (None: one per row)."""
    if trials is None:
        return None
    t = np.asarray(trials, dtype=float).ravel()
    y = np.asarray(nums, dtype=float).ravel()
    d = np.ones_like(y) if dens is None else np.asarray(dens, dtype=float).ravel()
    if t.shape != y.shape:
        raise ConfigError(f"{y.size} rows but {t.size} trial counts")
    keep = ~(np.isnan(y) | np.isnan(d)) & (d > 0)
    return float(t[keep].sum())


def _n_eff(s: _Sample, var: float, trials: float | None) -> float:
    """Korn-Graubard effective n of a clustered share: p(1-p) over the cluster-robust
    variance, capped at the scored units, scaled by (z / t_{k-1})^2."""
    units = float(s.y.size) if trials is None else trials
    pq = s.value * (1 - s.value)
    n_eff = units if var == 0 or pq == 0 else min(units, pq / var)
    return n_eff * (_z() / _t(s.k - 1)) ** 2


def paired_interval(
    num_a: Sequence[float] | np.ndarray,
    den_a: Sequence[float] | np.ndarray | None,
    num_b: Sequence[float] | np.ndarray,
    den_b: Sequence[float] | np.ndarray | None,
    clusters: Sequence[object] | None = None,
    *,
    bounded: bool | None = None,
    trials_a: Sequence[float] | np.ndarray | None = None,
    trials_b: Sequence[float] | np.ndarray | None = None,
) -> Estimate:
    """Difference a - b of two pooled ratios over the same units, paired.

    `num_a[i]` and `num_b[i]` are unit i under two systems; only units defined
    on both sides (finite value, positive denominator) are pairs, and `n` is
    their number. A difference of shares is the **MOVER** interval (Zou and
    Donner) built from the two sides' Wilson intervals (design effect, their
    scored units as trials: `trials_a`/`trials_b`, see `interval`) and the
    cluster-level correlation of the two estimates, so variance the systems
    share cancels and the ends stay in [-1, 1] by construction, with or
    without paired spread. Other differences (tokens, bytes) are the
    cluster-robust t of the linearised difference, or NO_SPREAD when every
    cluster differs by the same amount.
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
    ra = (yca - a.value * dca) / a.d.sum()
    rb = (ycb - b.value * dcb) / b.d.sum()
    scale = a.k / (a.k - 1)
    var_a, var_b = scale * float(np.sum(ra**2)), scale * float(np.sum(rb**2))
    if _is_share(a, bounded) and _is_share(b, bounded):
        ta = None if trials_a is None else np.asarray(trials_a, dtype=float).ravel()[both]
        tb = None if trials_b is None else np.asarray(trials_b, dtype=float).ravel()[both]
        la, ua = wilson(a.value, _n_eff(a, var_a, None if ta is None else float(ta.sum())))
        lb, ub = wilson(b.value, _n_eff(b, var_b, None if tb is None else float(tb.sum())))
        r = 0.0 if var_a == 0 or var_b == 0 else scale * float(np.sum(ra * rb))
        r = 0.0 if r == 0 else max(-1.0, min(1.0, r / math.sqrt(var_a * var_b)))
        lo = diff - _mover(a.value - la, ub - b.value, r)
        hi = diff + _mover(ua - a.value, b.value - lb, r)
        return Estimate(diff, lo, hi, n, a.k, MOVER)
    var = scale * float(np.sum((ra - rb) ** 2))
    if var == 0:
        return Estimate(diff, diff, diff, n, a.k, NO_SPREAD)
    half = _t(a.k - 1) * math.sqrt(var)
    return Estimate(diff, diff - half, diff + half, n, a.k, PAIRED_T)


def _mover(x: float, y: float, r: float) -> float:
    """Half-width of one MOVER end: sqrt(x^2 + y^2 - 2rxy), at most x + y (|r| <= 1)."""
    return math.sqrt(max(x * x + y * y - 2 * r * x * y, 0.0))
