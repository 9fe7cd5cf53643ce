"""Fold-in's prefix filter under a fixed gram order, as a database would hold it
(issue #36's server-side fold-in prototype, `evals.bench_fold_server`).

`memkit.store.gram_index` proves l-prefix filtering exact for ANY fixed total
order of the grams; its order (by the scope's own frequencies) is per-scope
client state that a rebuild changes. Here the order needs no state: a static
list of common trigrams goes last (the most common last), every other gram
by `mix64` of its exact code (`gram_codes`: three code points in 63 bits, so
no two grams share a code), ties by the code. A row posts the first
`prefix_len(m)` of its m grams in that order; a probe reads its own first
`probe_codes` grams' postings, keeps the rows with enough hits and a possible
length, and scores those exactly. `PrefixPostings` is that search in memory:
the reference the property tests hold to brute force, and what the bench's
SQL must agree with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from memkit.errors import ConfigError
from memkit.store.gram_index import HITS, gram_codes
from memkit.text import jaccard, trigrams


def common_trigrams(docs: Iterable[str], k: int) -> np.ndarray:
    """The `k` trigram codes in the most documents of `docs`, most common first
    (ties by code), counted in batches of 4,096 documents."""
    counts: dict[int, int] = {}
    batch: list[str] = []

    def flush() -> None:
        row, codes = gram_codes(batch)
        if codes.size:
            pairs = np.unique(np.stack([row, codes]), axis=1)
            u, c = np.unique(pairs[1], return_counts=True)
            for code, n in zip(u.tolist(), c.tolist(), strict=True):
                counts[code] = counts.get(code, 0) + n
        batch.clear()

    for d in docs:
        batch.append(d)
        if len(batch) >= 4096:
            flush()
    flush()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return np.asarray([c for c, _ in ranked], dtype=np.int64)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fixed bijection of uint64 that scatters the codes,
    so the grams off the common list come in no order related to their letters."""
    z = np.asarray(x).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


_COMMON_BASE = np.uint64(1 << 63)


class GramOrder:
    """A fixed total order of every trigram code: by key, then code. The key is
    mix64(code) >> 1 (< 2**63) off the list, 2**63 + place on it, the most
    common gram (`common[0]`) placed last."""

    def __init__(self, common: Sequence[int] | np.ndarray = ()):
        self.common = np.asarray(common, dtype=np.int64)
        if np.unique(self.common).size != self.common.size:
            raise ConfigError("the common trigram list repeats a code")
        by_code = np.argsort(self.common)
        self._sorted = self.common[by_code]
        self._place = (self.common.size - 1 - by_code).astype(np.uint64)

    def keys(self, codes: np.ndarray) -> np.ndarray:
        codes = np.asarray(codes, dtype=np.int64)
        k = mix64(codes) >> np.uint64(1)
        if self._sorted.size:
            pos = np.minimum(np.searchsorted(self._sorted, codes), self._sorted.size - 1)
            hit = self._sorted[pos] == codes
            k[hit] = _COMMON_BASE + self._place[pos[hit]]
        return k

    def sort(self, codes: np.ndarray) -> np.ndarray:
        """`codes` in the order."""
        codes = np.asarray(codes, dtype=np.int64)
        return codes[np.lexsort((codes, self.keys(codes)))]


def prefix_len(m: Any, floor: float, hits: int) -> Any:
    """How many of its first grams a row of m grams posts (as `GramIndex`)."""
    m = np.asarray(m, dtype=np.int64)
    return np.minimum(m, m - np.ceil(floor * m - 1e-9).astype(np.int64) + hits)


def gram_code(g: str) -> int:
    """The `gram_codes` code of one trigram."""
    return (ord(g[0]) << 42) | (ord(g[1]) << 21) | ord(g[2])


def row_prefixes(
    texts: Sequence[str], order: GramOrder, floor: float, hits: int = HITS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(text index, code) of every posting of `texts`, grouped by text and in the
    order within each, and each text's number of distinct grams."""
    row, codes = gram_codes(list(texts))
    m = np.bincount(row, minlength=len(texts)).astype(np.int64)
    if codes.size == 0:
        return row, codes, m
    o = np.lexsort((codes, order.keys(codes), row))
    row, codes = row[o], codes[o]
    keep = np.ones(row.size, dtype=bool)
    keep[1:] = (row[1:] != row[:-1]) | (codes[1:] != codes[:-1])
    row, codes = row[keep], codes[keep]
    m = np.bincount(row, minlength=len(texts)).astype(np.int64)
    starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    posted = np.arange(row.size) - starts[row] < prefix_len(m, floor, hits)[row]
    return row[posted], codes[posted], m


def probe_codes(
    grams: frozenset[str], order: GramOrder, t: float, hits: int = HITS
) -> tuple[list[int], int]:
    """The codes whose postings a probe at threshold `t` (> 0) reads, in the
    order, and the hits a row needs among them; ([], 0) when nothing can match."""
    n = len(grams)
    need = max(1, math.ceil(t * n - 1e-9))
    if n == 0 or need > n:
        return [], 0
    codes = np.fromiter(map(gram_code, grams), np.int64, n)
    take = min(n, n - need + hits)
    return order.sort(codes)[:take].tolist(), min(hits, need)


def length_bounds(n: int, t: float) -> tuple[int, int]:
    """The gram counts a row can have and reach similarity t with n grams (loose by one)."""
    return math.floor(t * n - 1e-9), math.ceil(n / t + 1e-9)


class PrefixPostings:
    """The server's search in memory: postings {code: [rowid]} of each row's
    prefix (posted for thresholds >= `floor`), probed as the SQL probes."""

    def __init__(self, order: GramOrder, floor: float, hits: int = HITS):
        if not 0.0 < floor <= 1.0:
            raise ConfigError(f"floor {floor!r} outside (0, 1]")
        self.order, self.floor, self.hits = order, float(floor), int(hits)
        self.post: dict[int, list[int]] = {}
        self.rows: dict[int, str] = {}

    def add(self, rowid: int, content: str) -> None:
        if rowid in self.rows:
            raise ConfigError(f"rowid {rowid} posted twice")
        self.rows[rowid] = content
        _, codes, _ = row_prefixes([content], self.order, self.floor, self.hits)
        for c in codes.tolist():
            self.post.setdefault(c, []).append(rowid)

    def candidates(self, grams: frozenset[str], t: float) -> list[int]:
        """Rowids with enough hits in the probe's prefix (GROUP BY ... HAVING)."""
        if not t >= self.floor:
            raise ConfigError(f"threshold {t!r} below the postings' floor {self.floor}")
        codes, h = probe_codes(grams, self.order, t, self.hits)
        counts: dict[int, int] = {}
        for c in codes:
            for r in self.post.get(c, ()):
                counts[r] = counts.get(r, 0) + 1
        lo, hi = length_bounds(len(grams), t)
        return [r for r, k in counts.items() if k >= h and lo <= len(trigrams(self.rows[r])) <= hi]

    def similar(self, grams: frozenset[str], t: float) -> dict[int, float]:
        """{rowid: similarity} of the rows at or above `t`, scored exactly."""
        out = {}
        for r in self.candidates(grams, t):
            sim = jaccard(grams, trigrams(self.rows[r]))
            if sim >= t:
                out[r] = sim
        return out
