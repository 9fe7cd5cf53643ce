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
length, and scores those exactly. The order and the prefixes are the store's
own (`memkit.store.fold_postings`, which the `fold_search="server"` mode
adopted from this prototype); this module keeps what only the bench needs:
counting a common list (`common_trigrams`) and `PrefixPostings`, that search
in memory, the reference the property tests hold to brute force and what the
bench's SQL must agree with.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from memkit.errors import ConfigError
from memkit.store.fold_postings import GramOrder, length_bounds, probe_codes, row_postings
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
        _, codes, _ = row_postings([content], self.order, self.floor, self.hits)
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
