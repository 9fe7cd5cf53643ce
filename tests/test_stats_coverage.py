"""Coverage of the 95% intervals, by simulation with known truth.

Each case draws many samples from a model whose true value is known, builds
the interval `evals.stats` reports for that kind of metric, and counts how
often it covers the truth: it must be 92-98 % (1,000 draws give a standard
error of about 0.7 points). Proportions near 0, 0.5 and 1 on independent
units, and clustered data (8 and 50 clusters of unequal size with a
between-cluster effect) for a proportion, a bounded score, a pooled byte
share, an unbounded count and a paired difference.
"""

from __future__ import annotations

import numpy as np
import pytest

from evals.stats import (
    CLUSTER_T,
    PAIRED_T,
    WILSON,
    WILSON_DEFF,
    interval,
    paired_interval,
)

DRAWS = 1000


def _clusters(rng, k):
    """Cluster index per unit; clusters of 10-59 units (a scope holds ~37 probes)."""
    return np.repeat(np.arange(k), rng.integers(10, 60, k))


def _beta(rng, mean, icc, size):
    a, b = mean * (1 - icc) / icc, (1 - mean) * (1 - icc) / icc
    return rng.beta(a, b, size)


def binary_independent(rng, n, p):
    return interval(rng.binomial(1, p, n).astype(float)), p


def binary_clustered(rng, k, p=0.3, icc=0.05):
    codes = _clusters(rng, k)
    pc = _beta(rng, p, icc, k)
    return interval(rng.binomial(1, pc[codes]).astype(float), None, codes), p


def score_clustered(rng, k, mean=0.6, icc=0.05):
    """A per-unit score in [0, 1] (like nDCG) with a cluster effect."""
    codes = _clusters(rng, k)
    mc = _beta(rng, mean, icc, k)[codes]
    values = rng.beta(mc * 4 + 0.05, (1 - mc) * 4 + 0.05)
    return interval(values, None, codes), (mean * 4 + 0.05) / 4.1  # E[a / (a + b)]


def bytes_share_clustered(rng, k, share=0.4, icc=0.05):
    """A pooled share of bytes (like budget waste): bytes per unit vary."""
    codes = _clusters(rng, k)
    sc = _beta(rng, share, icc, k)[codes]
    d = rng.integers(50, 900, codes.size).astype(float)
    y = d * rng.binomial(1, sc)
    return interval(y, d, codes), share


def count_clustered(rng, k, mean=2.0):
    """An unbounded per-unit count (like tokens or bytes) with a cluster effect."""
    codes = _clusters(rng, k)
    lam = mean * rng.gamma(10.0, 0.1, k)[codes]
    return interval(rng.poisson(lam).astype(float), None, codes), mean


def paired_clustered(rng, k, pa=0.6, pb=0.5, icc=0.05):
    """Two systems on the same units: the difference of their shares."""
    codes = _clusters(rng, k)
    base = _beta(rng, 0.5, icc, k)[codes]
    a = rng.binomial(1, np.clip(base + (pa - 0.5), 0, 1)).astype(float)
    b = rng.binomial(1, np.clip(base + (pb - 0.5), 0, 1)).astype(float)
    return paired_interval(a, None, b, None, codes), pa - pb


CASES = [
    ("p=0.01, 300 independent units", WILSON, lambda r: binary_independent(r, 300, 0.01)),
    ("p=0.5, 300 independent units", WILSON, lambda r: binary_independent(r, 300, 0.5)),
    ("p=0.99, 300 independent units", WILSON, lambda r: binary_independent(r, 300, 0.99)),
    ("p=0.03, 40 independent units", WILSON, lambda r: binary_independent(r, 40, 0.03)),
    ("p=0.97, 40 independent units", WILSON, lambda r: binary_independent(r, 40, 0.97)),
    ("proportion, 8 clusters", WILSON_DEFF, lambda r: binary_clustered(r, 8)),
    ("proportion, 50 clusters", WILSON_DEFF, lambda r: binary_clustered(r, 50)),
    ("p=0.05, 8 clusters", WILSON_DEFF, lambda r: binary_clustered(r, 8, 0.05)),
    ("score in [0,1], 8 clusters", WILSON_DEFF, lambda r: score_clustered(r, 8)),
    ("score in [0,1], 50 clusters", WILSON_DEFF, lambda r: score_clustered(r, 50)),
    ("pooled byte share, 8 clusters", WILSON_DEFF, lambda r: bytes_share_clustered(r, 8)),
    ("pooled byte share, 50 clusters", WILSON_DEFF, lambda r: bytes_share_clustered(r, 50)),
    ("unbounded count, 8 clusters", CLUSTER_T, lambda r: count_clustered(r, 8)),
    ("unbounded count, 50 clusters", CLUSTER_T, lambda r: count_clustered(r, 50)),
    ("paired difference, 8 clusters", PAIRED_T, lambda r: paired_clustered(r, 8)),
    ("paired difference, 50 clusters", PAIRED_T, lambda r: paired_clustered(r, 50)),
]


def coverage(case, draws=DRAWS, seed=0):
    rng = np.random.default_rng(seed)
    hits, methods = 0, set()
    for _ in range(draws):
        e, truth = case(rng)
        methods.add(e.method.split(" (")[0])
        hits += e.lo <= truth <= e.hi
    return hits / draws, methods


@pytest.mark.parametrize(("label", "method", "case"), CASES, ids=[c[0] for c in CASES])
def test_95_intervals_cover_the_truth(label, method, case):
    rate, methods = coverage(case)
    print(f"{label}: coverage {rate:.3f} ({', '.join(sorted(methods))})")
    assert method in methods
    assert 0.92 <= rate <= 0.98, f"{label}: {rate:.3f}"
