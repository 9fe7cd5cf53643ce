"""The random-ranking baseline: exact expectations over a uniform permutation.

A retrieval number alone cannot say whether ranking helped: with 23
candidates and 3 gold rows, a random order already puts gold in the top 5
most of the time. Every ranking metric is therefore reported beside two
baselines (see `evals.scorers` and `evals.retrieval`):

- **full**: the same store, query and tunables with the floor off, so every
  live candidate of the scope is ranked (what the metric would be if the
  floor dropped nothing);
- **random**: the same candidates (the full ranking's rows) in a uniformly
  random order, as an *exact* expectation computed here, so no seed is needed.

`candidates` is the label of every candidate row (the gold fact a row holds,
or None), in any order; a fact may hold several rows (a missed fold). Each
function is the expectation of the matching metric over all n! orders.
Binomials are exact integers (`math.comb`); the float is taken at the end.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from fractions import Fraction

from memkit.errors import ConfigError

NAN = math.nan
Label = str | None


def _check_k(k: int) -> None:
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k!r}")


def hit_probability(n: int, m: int, k: int) -> Fraction:
    """P(at least one of m marked items is in the top k of a random order of n):
    1 - C(n-m, k) / C(n, k), with k clipped to n."""
    _check_k(k)
    if not 0 <= m <= n:
        raise ConfigError(f"need 0 <= marked <= n, got marked={m!r}, n={n!r}")
    if m == 0:
        return Fraction(0)
    k = min(k, n)
    return 1 - Fraction(math.comb(n - m, k), math.comb(n, k))


def rows_per_fact(candidates: Sequence[Label], relevant: Collection[str]) -> list[int]:
    """Rows holding each relevant fact (0 for a fact no candidate holds), sorted."""
    held = Counter(c for c in candidates if c is not None)
    return sorted(held.get(f, 0) for f in set(relevant))


def _marked(candidates: Sequence[Label], relevant: Collection[str]) -> int:
    rel = set(relevant)
    return sum(1 for c in candidates if c is not None and c in rel)


def expected_distinct_hits(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[distinct relevant facts in the top k]: sum over facts of P(one of its rows is)."""
    n = len(candidates)
    return float(sum(hit_probability(n, m, k) for m in rows_per_fact(candidates, relevant)))


def random_recall_at_k(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[recall@k] (distinct relevant facts in the top k / relevant facts); NaN without any."""
    _check_k(k)
    if not relevant:
        return NAN
    return expected_distinct_hits(candidates, relevant, k) / len(set(relevant))


def random_precision_at_k(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[P@k] (distinct relevant facts in the top k / k, short lists padded with misses)."""
    _check_k(k)
    if not relevant:
        return NAN
    return expected_distinct_hits(candidates, relevant, k) / k


def random_reciprocal_rank(candidates: Sequence[Label], relevant: Collection[str]) -> float:
    """E[1 / rank of the first relevant row] (0 when no candidate is relevant):
    the first of g relevant rows among n sits at rank r with probability
    C(n-r, g-1) / C(n, g)."""
    if not relevant:
        return NAN
    n, g = len(candidates), _marked(candidates, relevant)
    if g == 0:
        return 0.0
    total = sum(Fraction(math.comb(n - r, g - 1), r) for r in range(1, n - g + 2))
    return float(total / math.comb(n, g))


def first_occurrence_gain(n: int, m: int, r: int) -> Fraction:
    """P(rank r holds the first of a fact's m rows): (m/n) * C(n-r, m-1) / C(n-1, m-1)."""
    if m == 0 or r > n:
        return Fraction(0)
    return Fraction(m, n) * Fraction(math.comb(n - r, m - 1), math.comb(n - 1, m - 1))


def random_ndcg_at_k(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[nDCG@k] with binary gains where only a fact's first row gains (repeats gain 0),
    discount 1/log2(rank+1), over the ideal list of min(k, |relevant|) hits. The
    ideal is a constant, so the expectation is E[DCG] / ideal."""
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    n = len(candidates)
    counts = rows_per_fact(candidates, rel)
    dcg = sum(
        float(sum(first_occurrence_gain(n, m, r) for m in counts)) / math.log2(r + 1)
        for r in range(1, min(k, n) + 1)
    )
    return dcg / sum(1.0 / math.log2(r + 1) for r in range(1, min(k, len(rel)) + 1))


def random_recall_any(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[recall_any@k]: P(some relevant row in the top k) = 1 - C(n-g, k) / C(n, k)."""
    if not relevant:
        return NAN
    return float(hit_probability(len(candidates), _marked(candidates, relevant), k))


def random_recall_all(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[recall_all@k]: P(every relevant fact has a row in the top k), by
    inclusion-exclusion over facts, sum_S (-1)^|S| C(n - rows(S), k) / C(n, k),
    grouped by rows(S) through the coefficients of prod_f (1 - x^{m_f})."""
    _check_k(k)
    if not relevant:
        return NAN
    counts = rows_per_fact(candidates, relevant)
    if counts[0] == 0:
        return 0.0
    n = len(candidates)
    k = min(k, n)
    poly = {0: 1}
    for m in counts:
        nxt = dict(poly)
        for j, c in poly.items():
            nxt[j + m] = nxt.get(j + m, 0) - c
        poly = nxt
    total = sum(c * math.comb(n - j, k) for j, c in poly.items() if c)
    return float(Fraction(total, math.comb(n, k)))


def random_dcg_any(candidates: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """E[LongMemEval ndcg_any@k]: every relevant row gains 1 (repeats too), so rank r
    gains g/n in expectation; the authors' discount (1 at ranks 1-2, then 1/log2(r))."""
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    n = len(candidates)
    if n == 0:
        return 0.0
    g = _marked(candidates, rel)

    def disc(r: int) -> float:
        return 1.0 if r == 1 else 1.0 / math.log2(r)

    expected = g / n * sum(disc(r) for r in range(1, min(k, n) + 1))
    return expected / sum(disc(r) for r in range(1, min(k, len(rel)) + 1))
