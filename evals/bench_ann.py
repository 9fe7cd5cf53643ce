"""The HNSW half of `memkit bench store --backend postgres` (`evals.bench_backends`):
query vectors by vector source, timed recalls, recall@8 against the exact answer
with ties counted, and one pass over the scopes at an ef_search (a sweep runs
it once per value on the same indexes).

The baselines of those recalls: the exact answer (the full ranking) scores
1.000 by definition, and a random ranking of a scope of n rows k/n on
average (recall@8 at 1M rows: 0.000008), so every figure between is the index's.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np

from evals.bench_data import LIMIT, embedded, percentiles, perturbed, unit_vectors


def recalls(store, scope: str, qs: np.ndarray) -> tuple[list[list[tuple[str, float]]], list[float]]:
    """Each query's (id, score) hits, and its seconds."""
    hits, times = [], []
    for q in qs:
        t = time.perf_counter()
        got = store.recall(scope, "q", LIMIT, query_embedding=q)
        times.append(time.perf_counter() - t)
        hits.append([(h.id, h.score) for h in got])
    return hits, times


def recall_with_ties(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> float:
    """recall@k of `got` against the exact answer `want` ((id, score) each, best first):
    the share of `want` that `got` found, where a hit that is not in `want` but
    scores at least `want`'s last score counts (a tie at the k-th score: exact
    kept one of the tied rows, the index another, equally right). An empty
    exact answer is matched by an empty one (1.0) and by nothing else (0.0)."""
    if not want:
        return 1.0 if not got else 0.0
    ids, kth = {i for i, _ in want}, want[-1][1]
    found = sum(1 for i, score in got if i in ids or score >= kth)
    return min(found, len(want)) / len(want)


def queries(
    vectors: str, texts: list[str], vecs: np.ndarray, k: int, rng: random.Random, nrng
) -> np.ndarray:
    """`k` query vectors near stored rows: `random`, a stored vector plus noise;
    `wordllama`, the embedding of a stored text reworded (`perturbed`)."""
    if vectors == "wordllama":
        return embedded([perturbed(rng, texts[rng.randrange(len(texts))]) for _ in range(k)])
    return vecs[nrng.integers(0, len(vecs), k)] + 0.05 * unit_vectors(nrng, k)


def ann_recalls(ann: Any, scopes: list[tuple[Any, ...]], ef: int, log) -> dict:
    """HNSW recall at one ef_search on each (key, scope, queries, exact hits):
    p50/p95, recall@8 against the exact hits (ties counted, `recall_with_ties`),
    recall@1 (the same rule on each answer's first hit: was the best row found,
    the one a reworded query is about) and how many recalls were answered exactly
    instead."""
    out: dict = {"ef_search": ef}
    for key, scope, qq, want in scopes:
        before = ann.ann_counts["exact_fallback"]
        got, times = recalls(ann, scope, qq)
        hit = [recall_with_ties(g, w) for g, w in zip(got, want, strict=True)]
        out[f"{key}_p50"], out[f"{key}_p95"] = percentiles(times)
        out[f"{key}_recall8"] = float(np.mean(hit))
        out[f"{key}_recall1"] = float(
            np.mean([recall_with_ties(g[:1], w[:1]) for g, w in zip(got, want, strict=True)])
        )
        out[f"{key}_fallbacks"] = ann.ann_counts["exact_fallback"] - before
        log(
            f"  hnsw {scope} ef_search {ef}: p50 {out[f'{key}_p50']:.2f} ms, recall@8 "
            f"{out[f'{key}_recall8']:.3f}, recall@1 {out[f'{key}_recall1']:.3f}, "
            f"exact instead {out[f'{key}_fallbacks']}/{len(qq)}"
        )
    return out
